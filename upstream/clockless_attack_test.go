package upstream

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

func batchOf(kinds ...quorum.OpKind) []*call {
	b := make([]*call, len(kinds))
	for i, k := range kinds {
		b[i] = &call{op: &quorum.Op{Kind: k}}
	}
	return b
}

// TestClocklessOnlyForGivingBack: a batch skips TIME only when every call
// gives back; any call whose vote grants or extends (acquire, extend,
// commit, heal) or reads (inspect, status) keeps TIME for the whole
// batch, in any order, so a release queued with an acquire does not hide
// the acquire's clock.
func TestClocklessOnlyForGivingBack(t *testing.T) {
	give := []quorum.OpKind{quorum.OpRelease, quorum.OpLeave, quorum.OpTurnBack}
	if !clockless(batchOf(give...)) {
		t.Fatal("a batch that only gives back should carry no TIME")
	}
	for _, k := range []quorum.OpKind{quorum.OpAcquire, quorum.OpExtend, quorum.OpCommit, quorum.OpHeal, quorum.OpInspect} {
		for pos := 0; pos <= len(give); pos++ {
			kinds := append(append(append([]quorum.OpKind{}, give[:pos]...), k), give[pos:]...)
			if clockless(batchOf(kinds...)) {
				t.Fatalf("batch %v (with op %v at %d) is clockless", kinds, k, pos)
			}
		}
	}
}

// TestJumpDuringReleaseOnlyPeriodSeenAtAcquire: after a baseline, a node
// steps its clock while this process only sends it releases (no TIME,
// note sees nil); the next acquire's TIME is compared with the last TIME
// read, so the step is reported on the acquire's pipeline and its vote
// counts toward nothing. The releases neither move the baseline nor hide
// the step, forward or back.
func TestJumpDuringReleaseOnlyPeriodSeenAtAcquire(t *testing.T) {
	for _, step := range []time.Duration{50 * time.Millisecond, -50 * time.Millisecond} {
		c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed}
		base := time.Unix(1_700_000_000, 0)
		rtt := 100 * time.Microsecond
		at := time.Duration(0)
		if err := c.note(timeReply(base.Add(at+rtt/2)), at, at+rtt); err != nil {
			t.Fatal(err)
		}
		for range 200 { // 1 s of release-only batches, 5 ms apart; the step halfway
			at += 5 * time.Millisecond
			if err := c.note(nil, at, at+rtt); err != nil {
				t.Fatalf("a release batch: %v", err)
			}
		}
		at += 5 * time.Millisecond
		err := c.note(timeReply(base.Add(at+rtt/2+step)), at, at+rtt)
		var j *quorum.ClockJumpError
		if !errors.As(err, &j) {
			t.Fatalf("step %v after a release-only second: the acquire's TIME saw no jump", step)
		}
	}
}

// TestReleaseOnlyFirstRepliesSetNoBaseline: TIME-less replies do not set
// the baseline; the first reply that carries TIME does (an acquire, a
// renewal or the instance's health probe, which runs every second from
// the start), as before the change for a node whose first reply is the
// acquire.
func TestReleaseOnlyFirstRepliesSetNoBaseline(t *testing.T) {
	c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed}
	_ = c.note(nil, 0, time.Millisecond)
	if c.known {
		t.Fatal("a TIME-less reply set the baseline")
	}
}
