package instance_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/tlstest"
	"github.com/redis/go-redis/v9"
)

// clientTLS trusts ca and presents client, if given.
func clientTLS(t *testing.T, ca *tlstest.CA, client *tlstest.Files) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if client != nil {
		pair, err := tls.LoadX509KeyPair(client.Cert, client.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// TestTLSEndToEnd: clients reach lockproxy over mutual TLS, and lockproxy
// reaches real redis-servers that speak TLS only and require its client
// certificate. A plain client, and a TLS client without a certificate, are
// refused.
func TestTLSEndToEnd(t *testing.T) {
	ca := tlstest.NewCA(t, "test")
	srvFiles, cliFiles := ca.Server(t, "server"), ca.Client(t, "client", "lockproxy-client")
	nodeTLS := &redistest.TLS{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key, CAFile: ca.File, AuthClients: true,
		Client: clientTLS(t, ca, &cliFiles)}
	nodes := redistest.StartN(t, 3, redistest.Options{TLS: nodeTLS})
	cfg := testConfig(nodes)
	cfg.TLS = instance.TLSConfig{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key, CAFile: ca.File}
	cfg.Redlock.TLS = instance.NodeTLS{Enabled: true, CAFile: ca.File, CertFile: cliFiles.Cert, KeyFile: cliFiles.Key}
	in := startInstance(t, cfg)
	ctx := context.Background()

	c := redis.NewClient(&redis.Options{Addr: in.Addr(), TLSConfig: clientTLS(t, ca, &cliFiles)})
	defer c.Close()
	key := uniqueKey(t)
	if err := c.Do(ctx, "LOCK", key, "PX", 30000, "TOKEN", "tok").Err(); err != nil {
		t.Fatalf("LOCK over TLS: %v", err)
	}
	// LOCK answers once a majority granted; the last node a moment later.
	for _, n := range nodes {
		raw := redis.NewClient(&redis.Options{Addr: n.Addr(), TLSConfig: clientTLS(t, ca, &cliFiles)})
		eventually(t, 10*time.Second, "node "+n.Addr()+" holds the lock, read over TLS", func() bool {
			held, err := raw.Exists(ctx, key).Result()
			return held == 1 && err == nil
		})
		raw.Close()
	}
	plain := redis.NewClient(&redis.Options{Addr: in.Addr(), MaxRetries: -1})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a plain-TCP client was served by a TLS listener")
	}
	noCert := redis.NewClient(&redis.Options{Addr: in.Addr(), TLSConfig: clientTLS(t, ca, nil), MaxRetries: -1})
	defer noCert.Close()
	if err := noCert.Ping(ctx).Err(); err == nil {
		t.Fatal("a client without a certificate was served under mutual TLS")
	}

	// The same through redis-cli --tls, as an operator would.
	got := redisCLI(t, in.Addr(), "PING\nLOCK "+key+"-cli PX 30000 TOKEN t-1\nUNLOCK "+key+"-cli t-1\nUNLOCK "+key+" tok\n",
		"--tls", "--cacert", ca.File, "--cert", cliFiles.Cert, "--key", cliFiles.Key)
	want := []string{`^PONG$`, `^t-1$`, `^\d+$`, `^(29\d\d\d|30000)$`, `^1$`, `^1$`}
	if len(got) != len(want) {
		t.Fatalf("redis-cli --tls transcript:\n%q", got)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(got[i]) {
			t.Fatalf("redis-cli --tls line %d: %q, want %s\n%q", i+1, got[i], w, got)
		}
	}
}

// TestTLSCertificateReload: replacing the listener's certificate and key
// on disk takes effect without a restart: a client that trusts only the
// new CA gets in once the files change, and one that trusts only the old
// CA no longer does.
func TestTLSCertificateReload(t *testing.T) {
	oldCA, newCA := tlstest.NewCA(t, "old"), tlstest.NewCA(t, "new")
	files := oldCA.Server(t, "server")
	cfg := instance.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS = instance.TLSConfig{CertFile: files.Cert, KeyFile: files.Key}
	in := startInstance(t, cfg)
	handshake := func(ca *tlstest.CA) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", in.Addr(), clientTLS(t, ca, nil))
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := handshake(oldCA); err != nil {
		t.Fatalf("before the change: %v", err)
	}
	renewed := newCA.Server(t, "renewed")
	for _, mv := range [][2]string{{renewed.Key, files.Key}, {renewed.Cert, files.Cert}} {
		if err := os.Rename(mv[0], mv[1]); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for handshake(newCA) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was never served")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := handshake(oldCA); err == nil {
		t.Fatal("the replaced certificate is still served")
	}
}
