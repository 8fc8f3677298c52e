package resp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/resp"
)

// remote is the protected-mode seam: every client counts as from another
// host. A real non-loopback client needs a second host or network
// namespace; this stands in for one, and TestProtectedModeServesLoopback
// covers the real address check end to end.
func remote(string) bool { return false }

// TestProtectedModeRefusesRemoteClients: with no password, a client from
// another host gets Redis's DENIED text at once and is disconnected; its
// commands never run.
func TestProtectedModeRefusesRemoteClients(t *testing.T) {
	s := newOpsServer(t, resp.Config{ProtectedMode: true, IsLocal: remote})
	c := s.dial(t)
	c.send(t, frame("LOCK", "k"))
	got := c.reply(t)
	if !strings.HasPrefix(got, "-DENIED lockproxy is running in protected mode because protected mode is enabled and no password is set.") ||
		!strings.Contains(got, "protected_mode = false") || !strings.Contains(got, "password_file") {
		t.Fatalf("reply %q", got)
	}
	if !c.closed() {
		t.Fatal("the connection stayed open")
	}
	if n := s.locks.Load(); n != 0 {
		t.Fatalf("LOCK ran %d times for a refused client", n)
	}
}

// TestProtectedModeOffOrPassword: a password, or protected_mode = false,
// lets a remote client in (with a password it must still authenticate).
func TestProtectedModeOffOrPassword(t *testing.T) {
	withPass := newOpsServer(t, resp.Config{ProtectedMode: true, IsLocal: remote, Password: "pw"})
	c := withPass.dial(t)
	if got := c.do(t, "LOCK", "k"); got != "-NOAUTH Authentication required." {
		t.Fatalf("with a password: %q", got)
	}
	if got := c.do(t, "AUTH", "pw"); got != "+OK" {
		t.Fatalf("AUTH: %q", got)
	}
	if got := c.do(t, "LOCK", "k"); got != "+OK" {
		t.Fatalf("after AUTH: %q", got)
	}
	off := newOpsServer(t, resp.Config{ProtectedMode: false, IsLocal: remote})
	if got := off.dial(t).do(t, "LOCK", "k"); got != "+OK" {
		t.Fatalf("protected mode off: %q", got)
	}
}

// TestProtectedModeServesLoopback: the real address check, end to end: a
// client on 127.0.0.1 is served in protected mode without a password.
func TestProtectedModeServesLoopback(t *testing.T) {
	s := newOpsServer(t, resp.Config{ProtectedMode: true})
	if got := s.dial(t).do(t, "LOCK", "k"); got != "+OK" {
		t.Fatalf("loopback client: %q", got)
	}
}

// TestProtectedModeFollowsThePassword: a password removed at run time
// (a reload) puts the server back in protected mode for new clients.
func TestProtectedModeFollowsThePassword(t *testing.T) {
	s := newOpsServer(t, resp.Config{ProtectedMode: true, IsLocal: remote, Password: "pw"})
	s.srv.SetPassword("")
	if got := s.dial(t).do(t, "LOCK", "k"); !strings.HasPrefix(got, "-DENIED") {
		t.Fatalf("%q", got)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:6380":        true,
		"127.3.4.5:1":           true,
		"[::1]:6380":            true,
		"[::ffff:127.0.0.1]:80": true,
		"10.0.0.1:6380":         false,
		"192.168.1.2:6380":      false,
		"[2001:db8::1]:6380":    false,
		"0.0.0.0:6380":          false,
		"localhost:6380":        false, // a client's address is never a name
		"garbage":               false,
	} {
		if got := resp.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

// TestHTTPRequestClosesTheConnection: an HTTP POST whose body holds a
// command is closed at its first line, without a reply, as Redis does; the
// body never runs, and the attempt is logged.
func TestHTTPRequestClosesTheConnection(t *testing.T) {
	s := newOpsServer(t, resp.Config{})
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\nLOCK x PX 60000\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nLOCK x PX 60000\r\n",
	} {
		c := s.dial(t)
		c.send(t, req)
		var got []string
		for {
			r, err := readReply(c.r)
			if err != nil {
				break
			}
			got = append(got, r)
		}
		// GET is unknown to this table: its error comes before Host: closes.
		for _, r := range got {
			if !strings.HasPrefix(r, "-ERR unknown command 'GET'") {
				t.Errorf("%q: reply %q", req, r)
			}
		}
	}
	if n := s.locks.Load(); n != 0 {
		t.Fatalf("LOCK in an HTTP body ran %d times", n)
	}
	if n := s.logs.FilterMessageSnippet("Possible SECURITY ATTACK").Len(); n != 1 {
		t.Fatalf("%d security warnings logged for 2 requests within 10s, want 1", n)
	}
}

// TestQuitStopsTheBatch: commands sent after QUIT in the same write do not run.
func TestQuitStopsTheBatch(t *testing.T) {
	s := newOpsServer(t, resp.Config{})
	c := s.dial(t)
	c.send(t, frame("QUIT")+frame("LOCK", "k"))
	if got := c.reply(t); got != "+OK" {
		t.Fatalf("QUIT: %q", got)
	}
	if !c.closed() || s.locks.Load() != 0 {
		t.Fatalf("after QUIT: LOCK ran %d times", s.locks.Load())
	}
}

// TestMaxClientsRefusalsLogBounded: many refused connections log one line,
// not one each.
func TestMaxClientsRefusalsLogBounded(t *testing.T) {
	s := newOpsServer(t, resp.Config{MaxClients: 1})
	held := s.dial(t)
	if got := held.do(t, "PING"); got != "+PONG" {
		t.Fatal(got)
	}
	start := time.Now()
	for i := 0; i < 50; i++ {
		if got := s.dial(t).reply(t); got != "-ERR max number of clients reached" {
			t.Fatalf("refusal %d: %q", i, got)
		}
	}
	n := s.logs.FilterMessageSnippet("max number of clients").Len()
	if time.Since(start) < 10*time.Second && n != 1 {
		t.Fatalf("%d lines logged for 50 refusals", n)
	}
	if n < 1 || n > 50 {
		t.Fatalf("%d lines logged for 50 refusals", n)
	}
}
