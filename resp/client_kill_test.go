package resp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/resp"
)

// clientID asks a connection its CLIENT ID and its address as the server
// sees it (CLIENT INFO).
func clientID(t *testing.T, c *opsClient) (id, addr string) {
	t.Helper()
	id = strings.TrimPrefix(c.do(t, "CLIENT", "ID"), ":")
	info := c.do(t, "CLIENT", "INFO")
	for _, f := range strings.Fields(strings.TrimPrefix(info, "$")) {
		if a, ok := strings.CutPrefix(f, "addr="); ok {
			addr = a
		}
	}
	return id, addr
}

func waitClients(t *testing.T, s *opsServer, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.srv.Clients() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d clients, want %d", s.srv.Clients(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientKill: the forms Redis has: the old CLIENT KILL ip:port (+OK or
// an error) and the filters ID, ADDR, LADDR, TYPE, USER and SKIPME (the
// number closed). A killed client's connection is closed.
func TestClientKill(t *testing.T) {
	s := newOpsServer(t, resp.Config{})
	admin, a, b := s.dial(t), s.dial(t), s.dial(t)
	aID, _ := clientID(t, a)
	_, bAddr := clientID(t, b)
	adminID, adminAddr := clientID(t, admin)

	for _, tc := range []struct{ args, want string }{
		{"CLIENT KILL ID 0", "-ERR client-id should be greater than 0"},
		{"CLIENT KILL ID x", "-ERR client-id should be greater than 0"},
		{"CLIENT KILL USER bob", "-ERR No such user 'bob'"},
		{"CLIENT KILL TYPE nobody", "-ERR Unknown client type 'nobody'"},
		{"CLIENT KILL SKIPME maybe", "-ERR syntax error"},
		{"CLIENT KILL ID", "-ERR No such client"}, // the old form, with an address "ID"
		{"CLIENT KILL", "-ERR unknown subcommand or wrong number of arguments for 'KILL'. Try CLIENT HELP."},
		{"CLIENT KILL FOO bar", "-ERR syntax error"},
		{"CLIENT KILL ID 1 ADDR", "-ERR syntax error"},
		{"CLIENT KILL 127.0.0.1:1", "-ERR No such client"},
		{"CLIENT KILL TYPE pubsub", ":0"},
		{"CLIENT KILL ID " + adminID, ":0"}, // SKIPME yes by default
		{"CLIENT KILL ADDR " + adminAddr + " LADDR 127.0.0.1:1", ":0"},
		{"CLIENT KILL ID " + aID + " USER default TYPE normal", ":1"},
		{"CLIENT KILL " + bAddr, "+OK"},
		{"CLIENT KILL " + bAddr, "-ERR No such client"},
	} {
		if got := admin.do(t, strings.Fields(tc.args)...); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.args, got, tc.want)
		}
	}
	if !a.closed() || !b.closed() {
		t.Fatal("a killed client's connection is still open")
	}
	waitClients(t, s, 1)
	if got := admin.do(t, "CLIENT", "KILL", "ID", adminID, "SKIPME", "no"); got != ":1" {
		t.Fatalf("killing oneself: %q", got)
	}
	if !admin.closed() {
		t.Fatal("a client that killed itself stayed connected")
	}
	waitClients(t, s, 0)
}

// TestClientKillLaddr: LADDR matches the listener's address.
func TestClientKillLaddr(t *testing.T) {
	s := newOpsServer(t, resp.Config{})
	admin, victim := s.dial(t), s.dial(t)
	victim.do(t, "PING")
	if got := admin.do(t, "CLIENT", "KILL", "LADDR", s.addr); got != ":1" {
		t.Fatalf("%q", got)
	}
	if !victim.closed() {
		t.Fatal("still open")
	}
}

func TestClientHelp(t *testing.T) {
	s := newOpsServer(t, resp.Config{})
	got := s.dial(t).do(t, "CLIENT", "HELP")
	for _, want := range []string{"*", "+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", "+KILL <ip:port>", "+HELP", "+    Print this help.]"} {
		if !strings.Contains(got, want) {
			t.Errorf("CLIENT HELP lacks %q: %s", want, got)
		}
	}
}
