package resp_test

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/resp"
)

// TestMultiQueueBound: a transaction queues at most MaxRequest bytes of
// commands; the command past it is refused and EXEC aborts, running none.
func TestMultiQueueBound(t *testing.T) {
	s := newOpsServer(t, resp.Config{Limits: resp.Limits{MaxRequest: 2048}})
	c := s.dial(t)
	arg := strings.Repeat("x", 900)
	for _, step := range [][2]string{
		{"MULTI", "+OK"},
		{"LOCK " + arg, "+QUEUED"},
		{"LOCK " + arg, "+QUEUED"},
		{"LOCK " + arg, "-ERR lockproxy: the transaction's queued commands exceed max_request_bytes; it is discarded at EXEC"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors."},
		{"MULTI", "+OK"},
		{"LOCK " + arg, "+QUEUED"},
		{"EXEC", "*1[+OK]"},
	} {
		if got := c.do(t, strings.Fields(step[0])...); got != step[1] {
			t.Fatalf("%.20s: %q, want %q", step[0], got, step[1])
		}
	}
	if n := s.locks.Load(); n != 1 {
		t.Fatalf("LOCK ran %d times, want 1", n)
	}
}
