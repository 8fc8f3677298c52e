package instance_test

import (
	"context"
	"fmt"
	"strings"
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
