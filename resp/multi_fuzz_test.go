package resp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/resp"
)

// FuzzMulti sends sequences of MULTI, EXEC, DISCARD, LOCK (which counts its
// runs), PING and unknown commands, with any arguments, and checks each
// reply and the count against Redis 7's rules: nothing queued runs before
// EXEC, a refused command makes EXEC abort, EXEC replies the queue's
// replies in order, and the connection stays usable.
func FuzzMulti(f *testing.F) {
	for _, s := range []string{"MULTI;LOCK a;EXEC", "MULTI;LOCK a;DISCARD;LOCK b", "MULTI;MULTI;LOCK;EXEC", "EXEC;DISCARD;multi x;MULTI;exec x;LOCK a",
		"MULTI;nope;LOCK a;EXEC;LOCK a", "MULTI;PING;LOCK a b;ping x;EXEC"} {
		f.Add(s)
	}
	s := newOpsServer(f, resp.Config{})
	c := s.dial(f) // one connection for every input: a dial each would fill the host with TIME-WAIT sockets
	f.Fuzz(func(t *testing.T, in string) {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if got := c.do(t, "DISCARD"); got != "+OK" && got != "-ERR DISCARD without MULTI" { // a clean start
			t.Fatalf("DISCARD: %q", got)
		}
		m := &txModel{locks: s.locks.Load()}
		steps := strings.Split(in, ";")
		if len(steps) > 64 {
			steps = steps[:64]
		}
		for _, step := range steps {
			words := strings.Fields(step)
			if len(words) == 0 {
				continue
			}
			if !vocabulary[strings.ToLower(words[0])] {
				words[0] = "x-" + words[0] // never a command: QUIT, AUTH, SUBSCRIBE... stay out
			}
			want := m.step(words)
			if got := c.do(t, words...); !matches(got, want) {
				t.Fatalf("%q in %q: %q, want %q", step, in, got, want)
			}
			if got := s.locks.Load(); got != m.locks {
				t.Fatalf("%q in %q: LOCK ran %d times, want %d", step, in, got, m.locks)
			}
		}
		if got := c.do(t, "DISCARD"); got != "+OK" && got != "-ERR DISCARD without MULTI" {
			t.Fatalf("connection unusable after %q: %q", in, got)
		}
	})
}

var vocabulary = map[string]bool{"multi": true, "exec": true, "discard": true, "lock": true, "ping": true}

// matches compares a reply with the model's; "-ERR unknown command" stands
// for any unknown-command error.
func matches(got, want string) bool {
	if want == "-ERR unknown command" {
		return strings.HasPrefix(got, want)
	}
	return got == want
}

// txModel is Redis 7's transaction state of one connection.
type txModel struct {
	locks       int64 // LOCK runs so far, on the server
	inTx, dirty bool
	pending     []string // queued commands' replies
	queuedLocks int64
}

func (m *txModel) step(words []string) string {
	name := strings.ToLower(words[0])
	switch {
	case name == "multi" || name == "exec" || name == "discard":
		if len(words) != 1 {
			return m.reject(name, "ERR wrong number of arguments for '"+name+"' command")
		}
		return m.control(name)
	case name == "lock" && len(words) < 2:
		return m.reject(name, "ERR wrong number of arguments for 'lock' command")
	case name == "lock":
		return m.run("+OK", 1)
	case name == "ping" && len(words) == 1:
		return m.run("+PONG", 0)
	case name == "ping" && len(words) == 2:
		return m.run("$"+words[1], 0)
	case name == "ping":
		return m.run("-ERR wrong number of arguments for 'ping' command", 0)
	}
	return m.reject("", "ERR unknown command")
}

func (m *txModel) control(name string) string {
	switch {
	case name == "multi" && m.inTx:
		return "-ERR MULTI calls can not be nested"
	case name == "multi":
		m.inTx = true
		return "+OK"
	case !m.inTx:
		return "-ERR " + strings.ToUpper(name) + " without MULTI"
	case name == "discard":
		m.end()
		return "+OK"
	case m.dirty:
		m.end()
		return "-EXECABORT Transaction discarded because of previous errors."
	}
	reply := fmt.Sprintf("*%d[%s]", len(m.pending), strings.Join(m.pending, " "))
	m.locks += m.queuedLocks
	m.end()
	return reply
}

func (m *txModel) end() { m.inTx, m.dirty, m.pending, m.queuedLocks = false, false, nil, 0 }

func (m *txModel) reject(name, msg string) string {
	if m.inTx && name == "exec" {
		m.end()
		return "-EXECABORT Transaction discarded because of: " + strings.TrimPrefix(msg, "ERR ")
	}
	m.dirty = m.dirty || m.inTx
	return "-" + msg
}

// run is a command that runs: at once, or at EXEC when queued; locks is 1
// for LOCK.
func (m *txModel) run(reply string, locks int64) string {
	if !m.inTx {
		m.locks += locks
		return reply
	}
	m.pending = append(m.pending, reply)
	m.queuedLocks += locks
	return "+QUEUED"
}
