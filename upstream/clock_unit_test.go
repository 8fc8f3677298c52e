package upstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/quorum"
)

// timeReply is a TIME reply reading t.
func timeReply(t time.Time) *redis.TimeCmd {
	c := redis.NewTimeCmd(context.Background())
	c.SetVal(t)
	return c
}

// TestClockNoteDriftIsNoJump drives nodeClock.note with replies whose time
// moves as a clock drifting at 0.9% (within drift_factor 1%), and with
// slow replies (100 ms round trips) between fast ones: no jump. A 5 ms step
// is one, although the reply before it was slow: the bounds a fast reply
// set are kept (a comparison with the last reply alone missed it).
func TestClockNoteDriftIsNoJump(t *testing.T) {
	c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed}
	base := time.Unix(1_700_000_000, 0)
	node := func(at time.Duration) time.Time { return base.Add(at + time.Duration(float64(at)*0.009)) }
	var at time.Duration
	for i := range 2000 {
		rtt := 100 * time.Microsecond
		if i%7 == 0 {
			rtt = 100 * time.Millisecond
		}
		at += 5 * time.Millisecond
		if err := c.note(timeReply(node(at+rtt/2)), at, at+rtt); err != nil {
			t.Fatalf("reply %d (drift 0.9%%, rtt %v): %v", i, rtt, err)
		}
		at += rtt
	}
	at += 5 * time.Millisecond
	if err := c.note(timeReply(node(at+50*time.Millisecond)), at, at+100*time.Millisecond); err != nil {
		t.Fatalf("a slow reply: %v", err)
	}
	at += 105 * time.Millisecond
	err := c.note(timeReply(node(at).Add(5*time.Millisecond)), at, at+100*time.Microsecond)
	var j *quorum.ClockJumpError
	if !errors.As(err, &j) || j.Jump < 2*time.Millisecond || j.Jump > 5*time.Millisecond {
		t.Fatalf("a 5 ms step: %v", err)
	}
}
