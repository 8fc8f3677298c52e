package instance_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
)

// TestBadArguments: each malformed request gets a Redis-style error, the
// connection keeps serving, and no lock changes.
func TestBadArguments(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		c := dialRaw(t, in.Addr())
		longKey := strings.Repeat("k", 1025)
		cases := []struct {
			args []string
			want string
		}{
			{[]string{"LOCK"}, "-ERR wrong number of arguments for 'lock' command"},
			{[]string{"UNLOCK", "k"}, "-ERR wrong number of arguments for 'unlock' command"},
			{[]string{"UNLOCK", "k", "t", "x"}, "-ERR wrong number of arguments for 'unlock' command"},
			{[]string{"RENEW", "k"}, "-ERR wrong number of arguments for 'renew' command"},
			{[]string{"LOCKINFO"}, "-ERR wrong number of arguments for 'lockinfo' command"},
			{[]string{"LOCK", "k", "PX", "abc"}, "-ERR value is not an integer or out of range"},
			{[]string{"LOCK", "k", "PX", "1.5"}, "-ERR value is not an integer or out of range"},
			{[]string{"LOCK", "k", "PX", "-5"}, "-ERR invalid expire time in 'lock' command"},
			{[]string{"LOCK", "k", "PX", "0"}, "-ERR invalid expire time in 'lock' command"},
			{[]string{"LOCK", "k", "EX", "99999999999999999"}, "-ERR invalid expire time in 'lock' command"},
			{[]string{"LOCK", "k", "EX", "99999999999999999999999"}, "-ERR value is not an integer or out of range"},
			{[]string{"LOCK", "k", "PX", "100", "EX", "1"}, "-ERR syntax error"},
			{[]string{"LOCK", "k", "PX", "100", "PX", "100"}, "-ERR syntax error"},
			{[]string{"LOCK", "k", "PX"}, "-ERR syntax error"},
			{[]string{"LOCK", "k", "NX", "1"}, "-ERR syntax error"},
			{[]string{"LOCK", "k", "TOKEN", ""}, "-ERR invalid token: empty"},
			{[]string{"LOCK", "k", "WAIT", "-1"}, "-ERR timeout is negative"},
			{[]string{"LOCK", "", "PX", "100"}, "-ERR invalid key: empty"},
			{[]string{"LOCK", longKey, "PX", "100"}, "-ERR invalid key: longer than 1024 bytes (max_key_bytes)"},
			{[]string{"UNLOCK", longKey, "t"}, "-ERR invalid key: longer than 1024 bytes (max_key_bytes)"},
			{[]string{"RENEW", "k", "t", "EX", "5"}, "-ERR syntax error"},
			{[]string{"RENEW", "k", "t", "PX", "-1"}, "-ERR invalid expire time in 'renew' command"},
			{[]string{"SELECT", "16"}, "-ERR DB index is out of range"},
			{[]string{"SELECT", "one"}, "-ERR value is not an integer or out of range"},
			{[]string{"HELLO", "4"}, "-NOPROTO unsupported protocol version"},
			{[]string{"AUTH", "x"}, "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
			{[]string{"AUTH", "default", "any"}, "+OK"}, // no password: the default user takes any, as in Redis
			{[]string{"AUTH", "someone", "any"}, "-WRONGPASS invalid username-password pair or user is disabled."},
			{[]string{"HELLO", "2", "AUTH", "default", "any"}, "[server redis version 7.2.0 proto :2 id :1 mode standalone role master modules []]"},
			{[]string{"CLIENT", "SETNAME", "has space"}, "-ERR Client names cannot contain spaces, newlines or special characters."},
			{[]string{"SHUTDOWN"}, "-ERR unknown command 'SHUTDOWN', with args beginning with: "},
		}
		id := c.do("CLIENT", "ID") // HELLO names the connection's own id
		for _, tc := range cases {
			tc.want = strings.Replace(tc.want, " id :1 ", " id "+id+" ", 1)
			if got := c.do(tc.args...); got != tc.want {
				t.Errorf("%.60q: got %q, want %q", tc.args, got, tc.want)
			}
		}
		if got := c.do("PING"); got != "+PONG" {
			t.Fatalf("connection unusable after bad input: %q", got)
		}
		if got := c.do("LOCKINFO", "k"); got != "(nil)" {
			t.Fatalf("bad input changed a lock: %q", got)
		}
	})
}

// TestProtocolAbuse: a 100 MB bulk string, a huge multibulk count and a
// garbage byte stream each get a protocol error and a closed connection,
// while another client keeps being served and memory stays bounded.
func TestProtocolAbuse(t *testing.T) {
	in, _ := startRedlock(t, 3)
	other := dialRaw(t, in.Addr())
	if got := other.do("LOCK", "held", "PX", "60000", "TOKEN", "t"); !strings.HasPrefix(got, "[t :1 ") {
		t.Fatalf("LOCK: %q", got)
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	big := dialRaw(t, in.Addr())
	big.send("*2\r\n$4\r\nECHO\r\n$100000000\r\n")
	chunk := strings.Repeat("x", 1<<16)
	for range 64 { // 4 MiB of the body, bounded; the server stops reading long before
		if _, err := big.c.Write([]byte(chunk)); err != nil {
			break
		}
	}
	if got := big.reply(); got != "-ERR Protocol error: invalid bulk length" {
		t.Fatalf("100 MB bulk: %q", got)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 16<<20 {
		t.Fatalf("heap grew by %d bytes for one oversized request", grew)
	}

	for _, abuse := range []struct{ send, want string }{
		{"*999999999\r\n", "-ERR Protocol error: invalid multibulk length"},
		{"*1\r\n+PING\r\n", "-ERR Protocol error: expected '$', got '+'"},
		{"*1\r\n$-3\r\n", "-ERR Protocol error: invalid bulk length"},
		{"\"unbalanced\r\n", "-ERR Protocol error: unbalanced quotes in request"},
	} {
		c := dialRaw(t, in.Addr())
		c.send(abuse.send)
		if got := c.reply(); got != abuse.want {
			t.Errorf("%q: got %q, want %q", abuse.send, got, abuse.want)
		}
		if !c.closed() {
			t.Errorf("%q: connection left open", abuse.send)
		}
	}

	g := dialRaw(t, in.Addr())
	g.send("\x00\xff\x13garbage \x01\x02 with no newline at all" + strings.Repeat("z", 70000))
	if got := g.reply(); got != "-ERR Protocol error: too big inline request" {
		t.Fatalf("garbage stream: %q", got)
	}

	if got := other.do("LOCKINFO", "held"); !strings.HasPrefix(got, "[fence :") {
		t.Fatalf("the other client or its lock suffered: %q", got)
	}
}

// TestMaxClients: a connection beyond max_clients is refused with Redis's
// error; the others keep working.
func TestMaxClients(t *testing.T) {
	cfg := instance.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Limits.MaxClients = 2
	in := startInstance(t, cfg)
	a, b := dialRaw(t, in.Addr()), dialRaw(t, in.Addr())
	a.do("PING")
	b.do("PING")
	c := dialRaw(t, in.Addr())
	if got := c.reply(); got != "-ERR max number of clients reached" {
		t.Fatalf("third client: %q", got)
	}
	a.c.Close()
	eventually(t, 5*time.Second, "a slot frees up", func() bool {
		d := dialRaw(t, in.Addr())
		d.send("*1\r\n$4\r\nPING\r\n")
		return d.reply() == "+PONG"
	})
	if got := b.do("PING"); got != "+PONG" {
		t.Fatal(got)
	}
}
