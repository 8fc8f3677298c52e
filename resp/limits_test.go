package resp

import (
	"strings"
	"testing"
)

// TestInlineArgumentLimits: the guard checks RESP headers, and the server
// checks inline commands once parsed: too many words, or too long a word,
// get Redis's protocol error and a closed connection.
func TestInlineArgumentLimits(t *testing.T) {
	lim := Limits{MaxArgs: 3, MaxBulk: 8}
	tests := []struct{ send, want string }{
		{"ECHO abc\r\n", "$3\r\nabc\r\n"},
		{"PING a b c\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"ECHO " + strings.Repeat("x", 9) + "\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
	}
	s := newWatchServer(t, lim)
	for _, tt := range tests {
		c, r := s.dial(t)
		watchWrite(t, c, tt.send)
		watchEqual(t, watchReplies(t, r, 1), tt.want)
		if strings.HasPrefix(tt.want, "-") {
			watchEOF(t, r)
		}
	}
}

// TestUnauthenticatedPipeline: before AUTH each command is framed under the
// unauthenticated limits, after it under the normal ones, even when the
// client sends them in one write, as Redis does.
func TestUnauthenticatedPipeline(t *testing.T) {
	s := newWatchServerConfig(t, Config{Password: "pw"})
	long := strings.Repeat("x", 20000)
	c, r := s.dial(t)
	watchWrite(t, c, "AUTH pw\r\n*2\r\n$4\r\nECHO\r\n$20000\r\n"+long+"\r\n")
	watchEqual(t, watchReplies(t, r, 2), "+OK\r\n", "$20000\r\n"+long+"\r\n")

	c, r = s.dial(t)
	watchWrite(t, c, "*2\r\n$4\r\nECHO\r\n$20000\r\n"+long+"\r\n")
	watchEqual(t, watchReplies(t, r, 1), "-ERR Protocol error: unauthenticated bulk length\r\n")
	watchEOF(t, r)

	c, r = s.dial(t)
	watchWrite(t, c, "PING 1 2 3 4 5 6 7 8 9 10\r\n")
	watchEqual(t, watchReplies(t, r, 1), "-ERR Protocol error: unauthenticated multibulk length\r\n")
	watchEOF(t, r)
}
