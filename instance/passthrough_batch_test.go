package instance_test

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// wireCase is bytes sent in one write and the replies Redis sends for them,
// in order; closes says whether Redis then closes the connection.
type wireCase struct {
	name   string
	send   string
	want   []string
	closes bool
}

// runWire sends wc to addr in one write and checks the replies, each read
// with a deadline: a reply that never comes fails the test.
func runWire(t *testing.T, addr string, wc wireCase) {
	t.Helper()
	r := dialRaw(t, addr)
	r.send(wc.send)
	for i, want := range wc.want {
		if got := r.reply(); got != want {
			t.Fatalf("%s: reply %d = %q, want %q", wc.name, i, got, want)
		}
	}
	if wc.closes && !r.closed() {
		t.Fatalf("%s: the connection stayed open", wc.name)
	}
	if !wc.closes {
		if got := r.do("PING"); got != "+PONG" {
			t.Fatalf("%s: PING after the batch = %q", wc.name, got)
		}
	}
}

// batchCases are the batch endings of issue 27 §1: a blank line after the
// last command, a malformed command after one that runs, and a malformed
// header after one that runs. k is a key unique to the run.
func batchCases(k string) []wireCase {
	return []wireCase{
		{name: "blank line ends the batch", send: "SET " + k + ":c1 v\r\nGET " + k + ":c1\r\n\r\n", want: []string{"+OK", "v"}},
		{name: "blank lines between and after", send: "INCR " + k + ":n\r\n\r\n\r\nINCR " + k + ":n\r\n\r\n", want: []string{":1", ":2"}},
		{name: "RESP command then blank line", send: encodeCommand([]string{"INCR", k + ":r"}) + "\r\n", want: []string{":1"}},
		{name: "unbalanced quotes after INCR", send: "INCR " + k + ":cnt\r\nSET \"x\r\n",
			want: []string{":1", "-ERR Protocol error: unbalanced quotes in request"}, closes: true},
		{name: "bad multibulk length after INCR", send: "INCR " + k + ":cnt2\r\n*x\r\n",
			want: []string{":1", "-ERR Protocol error: invalid multibulk length"}, closes: true},
	}
}

// TestPassthroughBatchEndings: each batch ending of batchCases gets Redis's
// replies at once, in order, through lockproxy as from a plain
// redis-server (checked first), and no command that ran loses its reply.
func TestPassthroughBatchEndings(t *testing.T) {
	plain := redistest.Start(t, redistest.Options{})
	p := startPassthrough(t, "lock:*")
	for _, wc := range batchCases(uniqueKey(t)) {
		t.Run("redis/"+wc.name, func(t *testing.T) { runWire(t, plain.Addr(), wc) })
	}
	for _, wc := range batchCases(uniqueKey(t)) {
		t.Run("lockproxy/"+wc.name, func(t *testing.T) { runWire(t, p.in.Addr(), wc) })
	}
}

// TestPassthroughTooBigAfterQueued: a command too big for lockproxy's
// limits (an inline one with more words than max_args; Redis has no such
// limit for inline commands, so there is no plain-Redis run to compare) closes the connection,
// but only after the replies of the data commands before it in the same
// batch, which ran.
func TestPassthroughTooBigAfterQueued(t *testing.T) {
	p := startPassthroughWith(t, func(cfg *instance.Config) { cfg.Limits.MaxArgs = 8 }, "lock:*")
	k := uniqueKey(t)
	big := "ECHO" + strings.Repeat(" a", 8) + "\r\n"
	runWire(t, p.in.Addr(), wireCase{name: "too many inline words after INCR", send: "INCR " + k + "\r\nGET " + k + "\r\n" + big,
		want: []string{":1", "1", "-ERR Protocol error: invalid multibulk length"}, closes: true})
}
