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

// TestClockFirstReplyAgainstOwnClock: a node's first reply is checked
// against this process's wall clock. Within the allowed skew (beyond the
// round trip) it is the baseline; further off, either way, it is a jump
// marked First; with no skew allowed set, it is never checked.
func TestClockFirstReplyAgainstOwnClock(t *testing.T) {
	const skew = time.Second
	for _, tc := range []struct {
		name    string
		skew    time.Duration
		off     time.Duration // node clock − ours
		rtt     time.Duration
		jumped  bool
		forward bool
	}{
		{"in sync", skew, 0, time.Millisecond, false, false},
		{"ahead within the skew", skew, 900 * time.Millisecond, time.Millisecond, false, false},
		{"behind within the skew", skew, -900 * time.Millisecond, time.Millisecond, false, false},
		{"ahead by more, but within the round trip", skew, 1100 * time.Millisecond, 300 * time.Millisecond, false, false},
		{"ahead", skew, 10 * time.Second, time.Millisecond, true, true},
		{"behind", skew, -10 * time.Second, time.Millisecond, true, false},
		{"not checked", 0, 10 * time.Second, time.Millisecond, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed, skew: tc.skew}
			sent := mono()
			got := sent + tc.rtt
			node := monoBase.Add(sent + tc.rtt/2 + tc.off)
			err := c.note(timeReply(node), sent, got)
			var j *quorum.ClockJumpError
			if !tc.jumped {
				if err != nil {
					t.Fatalf("first reply %v off with a %v round trip: %v", tc.off, tc.rtt, err)
				}
			} else if !errors.As(err, &j) || !j.First || (j.Jump > 0) != tc.forward || j.Jump.Abs() < tc.off.Abs()-tc.rtt {
				t.Fatalf("first reply %v off: %v (%+v), want a First jump of about %v", tc.off, err, j, tc.off)
			}
			// The reply is the baseline either way: the next one, in step, is
			// no jump once the first reply was delivered (its observer held
			// the node out); before, it carries the jump again.
			sent2 := got + 10*time.Millisecond
			if err != nil {
				if again := c.note(timeReply(node.Add(sent2-sent)), sent2, sent2+tc.rtt); again != err {
					t.Fatalf("a reply read before the jump's was delivered: %v; want the jump %v again", again, err)
				}
				c.delivered(err)
			}
			if err := c.note(timeReply(node.Add(sent2-sent)), sent2, sent2+tc.rtt); err != nil {
				t.Fatalf("second reply, in step with the first: %v", err)
			}
		})
	}
}

// TestAttackSkewAfterSilence: a node in step with this process answers,
// then nothing comes from it for 1000 s (down, or unreachable), and its
// next reply shows its clock 5 s ahead. The drift allowance since the last
// reply (1% of 1000 s) hides the step from the check between replies; the
// node is then 5 s off this process's clock, as a new instance's first
// reply would show it, and must be taken as jumped as there.
func TestAttackSkewAfterSilence(t *testing.T) {
	c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed, skew: time.Second}
	sent := mono()
	if err := c.note(timeReply(monoBase.Add(sent)), sent, sent+time.Millisecond); err != nil {
		t.Fatalf("first reply, in step: %v", err)
	}
	sent2 := sent + 1000*time.Second
	err := c.note(timeReply(monoBase.Add(sent2+5*time.Second)), sent2, sent2+time.Millisecond)
	var j *quorum.ClockJumpError
	if !errors.As(err, &j) || j.Jump < 4*time.Second {
		t.Fatalf("a reply 5 s off this process's clock after 1000 s of silence: %v; want a jump", err)
	}
	c.delivered(err)
	// The next reply, in step with the stepped clock, is no jump again.
	sent3 := sent2 + 10*time.Millisecond
	if err := c.note(timeReply(monoBase.Add(sent3+5*time.Second)), sent3, sent3+time.Millisecond); err != nil {
		t.Fatalf("next reply, in step with the stepped clock: %v", err)
	}
	// A node off this process's clock from the start (its first reply was
	// taken as a jump already) is not taken as jumping again at each reply.
	c = &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed, skew: time.Second}
	c.delivered(c.note(timeReply(monoBase.Add(sent+5*time.Second)), sent, sent+time.Millisecond))
	if err := c.note(timeReply(monoBase.Add(sent2+5*time.Second)), sent2, sent2+time.Millisecond); err != nil {
		t.Fatalf("a node 5 s off since its first reply, after a silence: %v", err)
	}
}

// TestAttackSkewOwnClockStepped: this process's wall clock was stepped
// 30 s forward after it started (an instance started before NTP set its
// clock, as at boot), and a node in step with its wall clock now answers
// for the first time. It is in step with this instance's clock: no jump.
// A node 30 s off the wall clock now is one.
func TestAttackSkewOwnClockStepped(t *testing.T) {
	const step = 30 * time.Second
	anchor := func() time.Duration { return time.Duration(monoBase.UnixNano()) + step }
	c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed, skew: time.Second, anchor: anchor}
	sent := mono()
	if err := c.note(timeReply(monoBase.Add(sent+step)), sent, sent+time.Millisecond); err != nil {
		t.Fatalf("first reply of a node in step with this process's wall clock, stepped %v since start: %v", step, err)
	}
	c = &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed, skew: time.Second, anchor: anchor}
	var j *quorum.ClockJumpError
	if err := c.note(timeReply(monoBase.Add(sent)), sent, sent+time.Millisecond); !errors.As(err, &j) || !j.First || j.Jump > -29*time.Second {
		t.Fatalf("first reply of a node %v behind this process's wall clock: %v; want a First jump", step, err)
	}
}

// TestAttackSkewAfterSilenceNodeOffBefore: a node found 5 s off this
// process's clock at first contact (held out for it, then counted) is
// silent for 1000 s and comes back 14 s off: its clock stepped 9 s. The
// check after a silence compared it with this process's clock only for a
// node that was in step, and the check between replies allowed 1% of the
// silence, 10 s: the step went unseen. With the skew check on, the drift
// allowed between two replies is at most the skew: clocks synced within
// it do not move further apart, however long the silence.
func TestAttackSkewAfterSilenceNodeOffBefore(t *testing.T) {
	c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed, skew: time.Second}
	sent := mono()
	first := c.note(timeReply(monoBase.Add(sent+5*time.Second)), sent, sent+time.Millisecond)
	var j *quorum.ClockJumpError
	if !errors.As(first, &j) || !j.First {
		t.Fatalf("first reply 5 s off: %v; want a First jump", first)
	}
	c.delivered(first)
	sent2 := sent + 1000*time.Second
	err := c.note(timeReply(monoBase.Add(sent2+14*time.Second)), sent2, sent2+time.Millisecond)
	if !errors.As(err, &j) || j.First || j.Jump < 7*time.Second || j.Most < 9*time.Second {
		t.Fatalf("a 9 s step after 1000 s of silence, of a node 5 s off since its first reply: %v (%+v); want a jump of 9 s at most, 7 s at least (less the skew)", err, j)
	}
	c.delivered(err)
	// Unchanged after the silence, it is no jump (TestAttackSkewAfterSilence).
	sent3 := sent2 + 1000*time.Second
	if err := c.note(timeReply(monoBase.Add(sent3+14*time.Second)), sent3, sent3+time.Millisecond); err != nil {
		t.Fatalf("the same offset after another 1000 s: %v", err)
	}
}
