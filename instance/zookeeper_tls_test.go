package instance_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/tlstest"
	"github.com/lockproxy/lockproxy/internal/zktest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// copyFile copies src to dst through a rename, as certificate tools do.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

// TestZooKeeperTLS: lockproxy reaches a real ZooKeeper 3.8 on its TLS port
// (mutual TLS: the server requires lockproxy's client certificate) and
// grants and releases a lock there. An instance that trusts another CA is
// refused: its clients get an error, never a grant, and its log names the
// certificate problem. Once its CA file is replaced on disk by the right
// CA, it connects without a restart.
func TestZooKeeperTLS(t *testing.T) {
	ca, other := tlstest.NewCA(t, "zk"), tlstest.NewCA(t, "other")
	srv, cli := ca.Server(t, "zk-server"), ca.Client(t, "lockproxy", "lockproxy")
	zk := zktest.StartTLS(t, zktest.TLS{CertFile: srv.Cert, KeyFile: srv.Key, CAFile: ca.File})
	cfg := testConfig(nil)
	cfg.Backend = "zookeeper"
	cfg.ZooKeeper.Servers = []string{zk.SecureAddr()}
	cfg.ZooKeeper.SessionTimeoutMS = 4000
	cfg.ZooKeeper.TLS = instance.NodeTLS{Enabled: true, CAFile: ca.File, CertFile: cli.Cert, KeyFile: cli.Key}
	in := startInstance(t, cfg)
	c := newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	var g lockReply
	eventually(t, 30*time.Second, "a lock granted over TLS", func() bool {
		r, ok, err := lock(t.Context(), c, key, "PX", 30000, "TOKEN", "tls-tok")
		g = r
		return ok && err == nil
	})
	if g.token != "tls-tok" || g.fence <= 0 {
		t.Fatalf("LOCK over TLS: %+v", g)
	}
	if n, err := c.Do(t.Context(), "UNLOCK", key, "tls-tok").Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK over TLS: %d %v", n, err)
	}

	// A second instance trusts another CA, through a file it re-reads.
	caFile := filepath.Join(t.TempDir(), "zk-ca.pem")
	copyFile(t, other.File, caFile)
	wrong := cfg
	wrong.ZooKeeper.TLS.CAFile = caFile
	core, logs := observer.New(zap.WarnLevel)
	in2, err := instance.Start(wrong, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in2.Shutdown(t.Context()) })
	c2 := newClient(t, in2.Addr(), 2)
	if _, ok, err := lock(t.Context(), c2, key, "PX", 30000); ok || err == nil {
		t.Fatalf("LOCK through an instance that does not trust the server: granted=%v err=%v", ok, err)
	}
	eventually(t, 30*time.Second, "the refused certificate logged", func() bool {
		for _, e := range logs.FilterMessage("ZooKeeper: TLS connection refused").All() {
			if err, _ := e.ContextMap()["error"].(string); strings.Contains(err, "certificate signed by unknown authority") {
				return true
			}
		}
		return false
	})
	if err := c2.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after the refusal: %v", err)
	}

	copyFile(t, ca.File, caFile) // the CA rotated on disk
	eventually(t, 60*time.Second, "a lock granted once the CA file holds the right CA", func() bool {
		_, ok, err := lock(t.Context(), c2, key, "PX", 30000, "TOKEN", "after-rotation")
		return ok && err == nil
	})
}
