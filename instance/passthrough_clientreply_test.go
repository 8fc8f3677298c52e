package instance_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// replyStep is one command of a CLIENT REPLY session and the reply Redis
// 7.0 gives it; "" is no reply at all.
type replyStep struct {
	cmd  []string
	want string
}

// clientReplySteps is a session switching replies OFF, ON and SKIP around
// lock commands (SET NX, GET of the lock key) and, when data is set, data
// commands, whose keys start with prefix. It ends with RESET (which turns
// replies back on) and the subcommand's errors.
func clientReplySteps(prefix string, data bool) []replyStep {
	lock, d := prefix+"lock:cr", prefix+"d:"
	steps := []replyStep{
		{[]string{"SET", d + "k1", "v1"}, "+OK"},
		{[]string{"CLIENT", "REPLY", "OFF"}, ""},
		{[]string{"SET", d + "k2", "v2"}, ""},
		{[]string{"SET", lock, "t", "NX", "PX", "60000"}, ""},
		{[]string{"GET", d + "k1"}, ""},
		{[]string{"CLIENT", "REPLY", "SKIP"}, ""}, // ignored while OFF
		{[]string{"INCR", d + "n"}, ""},
		{[]string{"CLIENT", "REPLY", "ON"}, "+OK"},
		{[]string{"GET", d + "k2"}, "v2"},
		{[]string{"GET", lock}, "t"},
		{[]string{"CLIENT", "REPLY", "SKIP"}, ""},
		{[]string{"GET", d + "k1"}, ""}, // skipped
		{[]string{"INCR", d + "n"}, ":2"},
		{[]string{"CLIENT", "REPLY", "SKIP"}, ""},
		{[]string{"SET", lock, "t", "NX", "PX", "60000"}, ""}, // skipped
		{[]string{"SET", lock, "t", "NX", "PX", "60000"}, "(nil)"},
		{[]string{"CLIENT", "REPLY", "SKIP"}, ""},
		{[]string{"CLIENT", "REPLY", "SKIP"}, ""}, // skipped, and skips the next
		{[]string{"INCR", d + "n"}, ""},
		{[]string{"INCR", d + "n"}, ":4"},
		{[]string{"CLIENT", "REPLY", "SKIP"}, ""},
		{[]string{"CLIENT", "REPLY", "ON"}, "+OK"}, // ON answers even when skipped
		{[]string{"CLIENT", "REPLY", "OFF"}, ""},
		{[]string{"CLIENT", "REPLY", "FOO"}, ""}, // its error is not written either
		{[]string{"GET", lock}, ""},
		{[]string{"RESET"}, "+RESET"},
		{[]string{"GET", d + "k1"}, "v1"},
		{[]string{"CLIENT", "REPLY"}, "-ERR wrong number of arguments for 'client|reply' command"},
		{[]string{"CLIENT", "REPLY", "ON", "x"}, "-ERR wrong number of arguments for 'client|reply' command"},
		{[]string{"CLIENT", "REPLY", "FOO"}, "-ERR syntax error"},
		{[]string{"GET", lock}, "t"},
		{[]string{"PING"}, "+PONG"},
	}
	if data {
		return steps
	}
	var locks []replyStep
	for _, s := range steps {
		if !strings.HasPrefix(s.cmd[len(s.cmd)-1], d) && (len(s.cmd) < 2 || !strings.HasPrefix(s.cmd[1], d)) {
			locks = append(locks, s)
		}
	}
	return locks
}

// runClientReply plays steps on a new connection to addr in proto, sent
// all in one write (a pipeline) or a command per write, and checks that
// exactly the expected replies come, in order.
func runClientReply(t *testing.T, addr string, proto int, steps []replyStep, oneWrite bool) {
	t.Helper()
	c := dialProto(t, addr, proto)
	var all strings.Builder
	for _, s := range steps {
		cmd := encodeCommand(s.cmd)
		if oneWrite {
			all.WriteString(cmd)
		} else {
			c.send(cmd)
		}
	}
	if oneWrite {
		c.send(all.String())
	}
	for i, s := range steps {
		if s.want == "" {
			continue
		}
		if got := c.reply(); got != s.want {
			t.Fatalf("resp%d, one write %v: step %d %q: got %q, want %q", proto, oneWrite, i, s.cmd, got, s.want)
		}
	}
	// Nothing more: the next reply is this PING's.
	if got := c.do("PING", "end"); got != "end" {
		t.Fatalf("resp%d, one write %v: a reply too many: %q", proto, oneWrite, got)
	}
}

func encodeCommand(args []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// TestClientReply: CLIENT REPLY ON|OFF|SKIP as on Redis 7.0, checked first
// against a plain redis-server, then through lockproxy without a data
// Redis (lock commands) and with one (lock and data commands, pipelined
// and not: the replies of forwarded commands are written or dropped as
// CLIENT REPLY said when each came, in order with the lock replies).
func TestClientReply(t *testing.T) {
	type target struct {
		name string
		addr string
		data bool
	}
	plain := redistest.Start(t, redistest.Options{})
	nodes := redistest.StartN(t, 3, redistest.Options{})
	locksOnly := startInstance(t, testConfig(nodes))
	p := startPassthrough(t, "*lock:*")
	targets := []target{
		{"redis", plain.Addr(), true},
		{"redis-locks-only", plain.Addr(), false},
		{"lockproxy", locksOnly.Addr(), false},
		{"lockproxy-passthrough", p.in.Addr(), true},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			for _, proto := range []int{2, 3} {
				for _, oneWrite := range []bool{true, false} {
					prefix := fmt.Sprintf("%s:%d:%v:", tg.name, proto, oneWrite)
					runClientReply(t, tg.addr, proto, clientReplySteps(prefix, tg.data), oneWrite)
				}
			}
		})
	}
}

// TestPassthroughClientReplyRelayed: on a connection whose data Redis
// connection is relayed (RESP3 pub/sub), CLIENT REPLY is refused, since
// lockproxy relays what the data Redis sends there without telling replies
// from messages; the connection stays usable. A subscription made while
// replies are off is confirmed and its messages arrive, as on Redis.
func TestPassthroughClientReplyRelayed(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	c := dialProto(t, p.in.Addr(), 3)
	if got := c.do("SUBSCRIBE", "ch"); got != ">[subscribe ch :1]" {
		t.Fatalf("SUBSCRIBE: %q", got)
	}
	if got := c.do("CLIENT", "REPLY", "OFF"); !strings.HasPrefix(got, "-ERR lockproxy does not support CLIENT REPLY") {
		t.Fatalf("CLIENT REPLY OFF while relayed: %q", got)
	}
	if got := c.do("PING", "x"); got != "x" {
		t.Fatalf("PING after the refusal: %q", got)
	}

	for _, addr := range []string{p.data.Addr(), p.in.Addr()} {
		s := dialProto(t, addr, 2)
		s.send(encodeCommand([]string{"CLIENT", "REPLY", "OFF"}) + encodeCommand([]string{"SUBSCRIBE", "ch2"}))
		if got := s.reply(); got != "[subscribe ch2 :1]" {
			t.Fatalf("%s: SUBSCRIBE while replies are off: %q", addr, got)
		}
	}
}
