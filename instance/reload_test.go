package instance_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/tlstest"
	"github.com/redis/go-redis/v9"
)

// TestReloadLimits: Reload (what SIGHUP calls) applies new limits to the
// next request of a connection opened before it and to new connections:
// a smaller max_request_bytes refuses a request that passed before, a
// smaller max_clients refuses the next connection, an idle timeout closes
// an idle connection; max_key_bytes is reported as needing a restart.
func TestReloadLimits(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Limits.MaxClients = 100
	in := startInstance(t, cfg)
	big := strings.Repeat("x", 100<<10)
	old := dialRaw(t, in.Addr())
	if r := old.do("ECHO", big); r != big {
		t.Fatalf("ECHO of 100 KiB before the reload: %d bytes %.40q", len(r), r)
	}

	next := cfg
	next.Limits.MaxRequestBytes = 64 << 10
	next.Limits.MaxClients = 2
	next.Limits.MaxKeyBytes = 10
	applied, restart, err := in.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"limits.max_request_bytes", "limits.max_clients"} {
		if !slices.Contains(applied, k) {
			t.Errorf("applied %v lacks %s", applied, k)
		}
	}
	if !slices.Equal(restart, []string{"limits.max_key_bytes"}) {
		t.Errorf("restart %v, want [limits.max_key_bytes]", restart)
	}
	if r := old.do("ECHO", big); r != "-ERR Protocol error: too big request" {
		t.Fatalf("ECHO of 100 KiB after the reload, same connection: %.60q", r)
	}
	// Closed: EOF, or a reset since the rest of the request was never read.
	old.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := old.rd.ReadByte(); err == nil || os.IsTimeout(err) {
		t.Fatalf("the connection stayed open after a request over the limit: %v", err)
	}
	second := dialRaw(t, in.Addr())
	if r := second.do("PING"); r != "+PONG" {
		t.Fatalf("PING: %s", r)
	}
	eventually(t, 10*time.Second, "the refused connection no longer counted", func() bool {
		return strings.Contains(second.do("INFO", "clients"), "connected_clients:1\r\n")
	})
	third := dialRaw(t, in.Addr())
	if r := third.do("PING"); r != "+PONG" {
		t.Fatalf("a second connection under max_clients 2: %s", r)
	}
	if r := dialRaw(t, in.Addr()).reply(); r != "-ERR max number of clients reached" {
		t.Fatalf("a third connection under max_clients 2: %s", r)
	}
	// The key limit needs a restart: a 20-byte key is still taken.
	if r := second.do("LOCK", strings.Repeat("k", 20)+uniqueKey(t), "PX", "5000"); !strings.HasPrefix(r, "[") {
		t.Fatalf("LOCK with a long key after a max_key_bytes change: %s", r)
	}

	next.Limits.MaxClients = 100
	next.Limits.IdleTimeoutMS = 200
	if _, _, err := in.Reload(next); err != nil {
		t.Fatal(err)
	}
	idle := dialRaw(t, in.Addr())
	if r := idle.do("PING"); r != "+PONG" {
		t.Fatalf("PING after max_clients was raised: %s", r)
	}
	idle.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := idle.rd.ReadByte(); err != io.EOF {
		t.Fatalf("an idle connection under idle_timeout_ms 200: %v, want it closed", err)
	}
}

// sameStampCopy writes src's PEM over dst keeping dst's size (padding with
// newlines, which PEM parsing skips) and modification time, so that only
// a forced re-read, not the change check, can see the new content.
func sameStampCopy(t *testing.T, src, dst string) {
	t.Helper()
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	pad := int(fi.Size()) - len(b)
	if pad < 0 {
		t.Fatalf("%s is longer than %s", src, dst)
	}
	if err := os.WriteFile(dst, append(b, bytes.Repeat([]byte("\n"), pad)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// TestReloadNodeCA: Reload re-reads the nodes' CA file even when its size
// and modification time did not change, and new node connections verify
// against it: with a foreign CA, new connections fail and no lock is
// granted; with the nodes' CA back, locks are granted again.
func TestReloadNodeCA(t *testing.T) {
	ca, other := tlstest.NewCA(t, "nodes"), tlstest.NewCA(t, "other")
	srv := ca.Server(t, "node")
	nodes := redistest.StartN(t, 3, redistest.Options{TLS: &redistest.TLS{
		CertFile: srv.Cert, KeyFile: srv.Key, CAFile: ca.File, Client: clientTLS(t, ca, nil)}})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	// Pad the file so that either CA fits in its size.
	b, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, append(b, bytes.Repeat([]byte("\n"), 64)...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(nodes)
	cfg.Redlock.TLS = instance.NodeTLS{Enabled: true, CAFile: caFile}
	cfg.Redlock.NodeTimeoutMS = 2000
	in := startInstance(t, cfg)
	c := newClient(t, in.Addr(), 2)
	// dropNodeConns closes lockproxy's connections to every node, so that
	// the next calls dial anew.
	dropNodeConns := func() {
		for _, n := range nodes {
			raw := redis.NewClient(&redis.Options{Addr: n.Addr(), TLSConfig: clientTLS(t, ca, nil)})
			err := raw.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes").Err()
			raw.Close()
			if err != nil {
				t.Fatalf("CLIENT KILL on %s: %v", n.Addr(), err)
			}
		}
	}
	granted := func() bool {
		_, ok, err := lock(t.Context(), c, uniqueKey(t), "PX", 5000)
		return ok && err == nil
	}
	mustLock(t, c, uniqueKey(t), "PX", 5000)

	sameStampCopy(t, other.File, caFile)
	time.Sleep(1100 * time.Millisecond) // past the change check's period, which must still see no change
	dropNodeConns()
	eventually(t, 30*time.Second, "locks granted over new connections before the reload", granted)

	applied, _, err := in.Reload(cfg)
	if err != nil || !slices.Contains(applied, "tls files") {
		t.Fatalf("reload: applied %v, %v", applied, err)
	}
	dropNodeConns()
	eventually(t, 30*time.Second, "locks refused once new connections verify against the foreign CA", func() bool {
		_, ok, err := lock(t.Context(), c, uniqueKey(t), "PX", 5000)
		return !ok && err != nil
	})

	sameStampCopy(t, ca.File, caFile)
	if _, _, err := in.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "locks granted with the nodes' CA back", granted)
}
