package instance_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// startObserved is startInstance with every log line at info level and
// above kept for the test to count.
func startObserved(t *testing.T, cfg instance.Config) (*instance.Instance, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	in, err := instance.Start(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := in.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return in, logs
}

// linesWith counts the log lines whose message contains msg.
func linesWith(logs *observer.ObservedLogs, msg string) int {
	return logs.FilterMessageSnippet(msg).Len()
}

// authCmd is AUTH pass as a RESP frame.
func authCmd(pass string) string {
	return fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(pass), pass)
}

// TestAuthGuessing: wrong passwords pipelined on one connection are
// answered WRONGPASS ten times, then the connection is closed (on the old
// code all 50,000 were answered and it stayed open); they are counted in
// INFO stats (acl_access_denied_auth, Redis's name) and in /metrics
// (lockproxy_auth_failures_total), and logged rate-limited: one line for
// many guesses. A client that mistypes fewer times still authenticates on
// the same connection.
func TestAuthGuessing(t *testing.T) {
	cfg := embeddedConfig()
	cfg.Password = "right-pw"
	cfg.MetricsListen = "127.0.0.1:0"
	in, logs := startObserved(t, cfg)

	const guesses = 1000
	g := dialRaw(t, in.Addr())
	start := time.Now()
	g.send(strings.Repeat(authCmd("guess"), guesses))
	answered := 0
	for {
		g.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		r, err := readReply(g.rd)
		if err != nil {
			break // closed
		}
		if !strings.HasPrefix(r, "-WRONGPASS") {
			t.Fatalf("reply %d to a wrong password: %q", answered, r)
		}
		answered++
	}
	t.Logf("%d pipelined wrong passwords on one connection: %d answered in %v, then closed", guesses, answered, time.Since(start))
	if answered != 10 {
		t.Fatalf("%d wrong passwords answered on one connection, want 10 then a close", answered)
	}

	ok := dialRaw(t, in.Addr())
	for range 3 {
		if r := ok.do("AUTH", "typo"); !strings.HasPrefix(r, "-WRONGPASS") {
			t.Fatalf("AUTH typo: %q", r)
		}
	}
	if r := ok.do("HELLO", "3", "AUTH", "default", "typo"); !strings.HasPrefix(r, "-WRONGPASS") {
		t.Fatalf("HELLO AUTH typo: %q", r)
	}
	if r := ok.do("AUTH", "right-pw"); r != "+OK" {
		t.Fatalf("AUTH after four typos: %q", r)
	}
	info := ok.do("INFO", "stats")
	if !strings.Contains(info, "acl_access_denied_auth:14\r\n") {
		t.Fatalf("INFO stats after 14 wrong passwords:\n%s", info)
	}
	_, page := httpGet(t, in.MetricsAddr(), "/metrics")
	if v := metricValue(page, "lockproxy_auth_failures_total"); v != 14 {
		t.Fatalf("lockproxy_auth_failures_total %v, want 14", v)
	}
	if n := linesWith(logs, "authentication failed"); n < 1 || n > 2 {
		t.Fatalf("%d log lines for 14 wrong passwords, want 1 (rate-limited)", n)
	}
}

// garbage are the byte strings the flood sends, one per connection, each
// of which makes the server close the connection: malformed RESP that
// redcon rejects, a broken limit, an HTTP request, binary noise.
var garbage = []string{
	"*2\r\n$1\r\na\r\n:5\r\n",
	"*1\r\n$-5x\r\n",
	"*99999999\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\n\r\n",
	"*\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n",
	"\"unbalanced\r\n",
}

// flood opens n connections, at most par at a time, each sending one
// garbage string and reading until the server closes it (or 5 s pass).
func flood(t *testing.T, addr string, n, par int) {
	t.Helper()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return // counted by the caller through the server's log only
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, garbage[i%len(garbage)])
			_, _ = io.Copy(io.Discard, c)
		})
	}
	wg.Wait()
}

// TestLogFlood: 3,000 connections sending garbage write a bounded number of
// log lines, each saying how many it stands for (on the old code every
// connection that ended on a protocol error wrote its own "connection
// closed" line: 6,192 lines for 10,000 connections).
func TestLogFlood(t *testing.T) {
	cfg := embeddedConfig()
	in, logs := startObserved(t, cfg)
	before := logs.Len()
	const n = 3000
	start := time.Now()
	flood(t, in.Addr(), n, 50)
	c := dialRaw(t, in.Addr())
	eventually(t, 30*time.Second, "the flood's connections closed", func() bool {
		return strings.Contains(c.do("INFO", "clients"), "connected_clients:1\r\n")
	})
	took := time.Since(start)
	lines := logs.Len() - before
	t.Logf("%d garbage connections in %v: %d log lines", n, took, lines)
	for _, e := range logs.All()[before:] {
		t.Logf("  %.60s %v", e.Message, e.ContextMap())
	}
	// Each kind of per-connection event (closed on an error, refused at
	// max_clients, HTTP, TLS, accept, AUTH) logs a line per 10 s at most.
	if bound := 6 * (int(took/(10*time.Second)) + 1); lines > bound {
		t.Fatalf("%d garbage connections wrote %d log lines in %v, want at most %d", n, lines, took, bound)
	}
	if c.do("PING") != "+PONG" {
		t.Fatal("PING after the flood")
	}
}
