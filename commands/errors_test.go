package commands

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/engine"
)

// TestReplyErrorUnknownAcquire: an acquire whose outcome is unknown (a
// ZooKeeper create whose reply was lost) is a TIMEOUT that says the lock
// may be held and how to find out, never "nothing was granted".
func TestReplyErrorUnknownAcquire(t *testing.T) {
	got := replyError("k", &engine.UnknownOutcomeError{Op: "acquire", Silent: 1, Err: errors.New("connection closed")})
	if !strings.HasPrefix(got, "TIMEOUT outcome unknown") || !strings.Contains(got, "retry LOCK with the same TOKEN") || strings.Contains(got, "nothing was granted") {
		t.Fatalf("reply %q", got)
	}
}
