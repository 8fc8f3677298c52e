package tlsfiles_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/tlsfiles"
	"github.com/lockproxy/lockproxy/internal/tlstest"
)

// serve accepts TLS connections on a free loopback port and completes
// their handshakes until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string, ca *tlstest.CA, client *tlstest.Files) error {
	t.Helper()
	cfg, err := tlsfiles.Client(ca.File, certOf(client), keyOf(client), "127.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate on the first read.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	if errors.Is(err, io.EOF) {
		return nil // the test server closes after the handshake
	}
	return err
}

func certOf(f *tlstest.Files) string {
	if f == nil {
		return ""
	}
	return f.Cert
}

func keyOf(f *tlstest.Files) string {
	if f == nil {
		return ""
	}
	return f.Key
}

// TestMutualTLSAndCARotation: with a CA file, a client without a
// certificate or with one from another CA is refused; replacing the CA
// file admits the new CA's clients without a restart.
func TestMutualTLSAndCARotation(t *testing.T) {
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	srv := ca.Server(t, "srv")
	good, stranger := ca.Client(t, "good", "good"), other.Client(t, "stranger", "stranger")
	cfg, err := tlsfiles.Server(srv.Cert, srv.Key, ca.File, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if err := dial(t, addr, ca, &good); err != nil {
		t.Fatalf("a client of the CA: %v", err)
	}
	if dial(t, addr, ca, nil) == nil {
		t.Fatal("a client without a certificate got in")
	}
	if dial(t, addr, ca, &stranger) == nil {
		t.Fatal("a client of another CA got in")
	}
	both := append(must(os.ReadFile(ca.File)), must(os.ReadFile(other.File))...)
	if err := os.WriteFile(ca.File+".tmp", both, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ca.File+".tmp", ca.File); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for dial(t, addr, ca, &stranger) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the rotated CA file was never used")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrokenFileKeepsTheCertificate: a certificate file that no longer
// loads is reported and the previous certificate stays in use.
func TestBrokenFileKeepsTheCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t, "srv")
	var failures atomic.Int64
	cfg, err := tlsfiles.Server(srv.Cert, srv.Key, "", func(error) { failures.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if err := os.WriteFile(srv.Cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for failures.Load() == 0 {
		if err := dial(t, addr, ca, nil); err != nil {
			t.Fatalf("the previous certificate was dropped: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the broken file was never reported")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := dial(t, addr, ca, nil); err != nil {
		t.Fatalf("after the failed reload: %v", err)
	}
}

func TestMissingFilesFailAtStart(t *testing.T) {
	if _, err := tlsfiles.Server("/nonexistent.pem", "/nonexistent.key", "", nil); err == nil {
		t.Fatal("no error for missing files")
	}
	ca := tlstest.NewCA(t, "ca")
	if _, err := tlsfiles.Client(ca.File+".missing", "", "", "", nil); err == nil {
		t.Fatal("no error for a missing CA file")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// dialWith completes a handshake with addr under cfg.
func dialWith(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err == nil {
		c.Close()
	}
	return err
}

// TestDialerCAFileAndGroupReload: a Dialer verifies the server against its
// CA file's current content and the expected name; Group.Reload re-reads
// the CA file even when its size and modification time are unchanged.
func TestDialerCAFileAndGroupReload(t *testing.T) {
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	srv := ca.Server(t, "srv")
	cfg, err := tlsfiles.Server(srv.Cert, srv.Key, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	right, wrong := must(os.ReadFile(ca.File)), must(os.ReadFile(other.File))
	size := max(len(right), len(wrong)) + 16
	// Both fit one size, padded with newlines, which PEM parsing skips.
	padNL := func(b []byte) []byte {
		return append(append([]byte(nil), b...), bytes.Repeat([]byte("\n"), size-len(b))...)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, padNL(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().Add(-time.Hour)
	if err := os.Chtimes(caFile, stamp, stamp); err != nil {
		t.Fatal(err)
	}
	var g tlsfiles.Group
	d, err := g.Dialer(caFile, "", "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dialWith(addr, d.Config("127.0.0.1")); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a server of another CA: %v, want unknown authority", err)
	}
	if err := os.WriteFile(caFile, padNL(right), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(caFile, stamp, stamp); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past the change check's period: it must still see no change
	if err := dialWith(addr, d.Config("127.0.0.1")); err == nil {
		t.Fatal("the CA file was re-read though its stamp did not change")
	}
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := dialWith(addr, d.Config("127.0.0.1")); err != nil {
		t.Fatalf("after Reload: %v", err)
	}
	named, err := g.Dialer(caFile, "", "", "wrong.example", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dialWith(addr, named.Config("127.0.0.1")); err == nil {
		t.Fatal("a certificate for another name was accepted")
	}
}
