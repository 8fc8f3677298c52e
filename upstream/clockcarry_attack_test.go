package upstream

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestAttackSecondJumpDropsCarriedJump: TestAttackJumpSeenByStatusHeldBeforeNextVote,
// and then node 0's clock is stepped back (set right again) before the
// status read's observer has run. The status read saw the +10 s step
// (the jump that must hold the node out); the next acquire reads the step
// back, a jump of its own. Each reading must carry every jump not yet
// delivered: when the step back replaced the step forward as the one
// carried, the step forward was carried by no call but the status read's,
// still on its way, and the acquire after the step back's (in step with
// the clock set right) was a plain vote, counted before the +10 s hold.
func TestAttackSecondJumpDropsCarriedJump(t *testing.T) {
	n, clock, forward, release, late := stepSeenByLateStatus(t)
	ctx := testCtx(t)
	if _, err := clock.Step(-10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	// Acquires until one is a vote: one of them before it must carry the
	// step forward, whose hold has not landed yet.
	carried := false
	for i := range 5 {
		c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
		var j *quorum.ClockJumpError
		if errors.As(err, &j) && error(j) == *forward {
			carried = true
		}
		if err == nil {
			if !carried {
				t.Fatalf("acquire %d after the step back, before the status read's observer held the node out for the +10 s step: a vote (%+v), and no acquire before it carried that step", i, c)
			}
			break
		}
		if !errors.Is(err, quorum.ErrClockJumped) {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	if !carried {
		t.Fatal("no acquire carried the step forward")
	}
	close(release)
	if r := <-late; !errors.Is(r.Err, quorum.ErrClockJumped) {
		t.Errorf("status read after the step: %v; want the jump", r.Err)
	}
}

// TestAttackTimeDeniedReleaseBatchedWithAcquire: TestAttackTimeDeniedIsNoVote
// says releases still work on a node whose TIME is denied, as they read
// no clock. A release batched with an acquire (the two queued while the
// node was busy, as under load) rides in a pipeline that ends with TIME:
// the TIME error answered it too, though the release ran and its outcome
// depends on no clock.
func TestAttackTimeDeniedReleaseBatchedWithAcquire(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t)
	n := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: 1})
	if _, err := n.Acquire(ctx, "k", hold("a", time.Minute)); err != nil { // before TIME is denied
		t.Fatal(err)
	}
	if err := rawClient(t, s.Addr()).Do(ctx, "ACL", "SETUSER", "default", "-time").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			_ = s.Resume()
		}
	}()
	before := n.Stats().Calls
	first := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, "x", hold("b", time.Minute)); first <- err }() // the one pipeline, stuck
	eventually(t, 5*time.Second, "the first acquire sent", func() bool { return n.Stats().Calls-before == 1 })
	released := make(chan error, 1)
	go func() {
		ok, err := n.Release(ctx, "k", "a")
		if err == nil && !ok {
			err = errors.New("not released")
		}
		released <- err
	}()
	batched := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, "y", hold("b", time.Minute)); batched <- err }()
	eventually(t, 5*time.Second, "the release and the acquire queued", func() bool { return n.queued() == 2 })
	paused = false
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	<-first
	if err := <-batched; !errors.Is(err, ErrNoClock) {
		t.Errorf("acquire batched with the release: %v; want ErrNoClock", err)
	}
	if err := <-released; err != nil {
		t.Fatalf("release batched with an acquire on a node whose TIME is denied: %v; want released", err)
	}
}

// TestCarriedJumpsEachUntilDelivered: nodeClock alone. A status read
// sees a +10 s step, its delivery late; the pipeline's next reading shows
// the step back (the clock set right). That reading carries the step
// forward, the older; the one after it the step back, which nothing
// delivered yet; only then does a reading show nothing.
func TestCarriedJumpsEachUntilDelivered(t *testing.T) {
	c := &nodeClock{factor: quorum.DefaultDriftFactor, fixed: quorum.DefaultDriftFixed}
	at := func(sent, off time.Duration) error {
		return c.note(timeReply(monoBase.Add(sent+off)), sent, sent+time.Millisecond)
	}
	sent := mono()
	if err := at(sent, 0); err != nil {
		t.Fatal(err)
	}
	step := 10 * time.Millisecond
	forward := at(sent+step, 10*time.Second) // the status read's: its delivery is late
	if !errors.Is(forward, quorum.ErrClockJumped) {
		t.Fatalf("+10 s: %v; want a jump", forward)
	}
	if err := at(sent+2*step, 0); err != forward { // the step back
		t.Fatalf("the reading of the step back, the step forward not delivered: %v; want the step forward %v", err, forward)
	}
	c.delivered(forward) // the pipeline's calls delivered with it
	back := at(sent+3*step, 0)
	var j *quorum.ClockJumpError
	if !errors.As(back, &j) || back == forward || j.Jump > -9*time.Second {
		t.Fatalf("the reading after: %v; want the step back, carried", back)
	}
	c.delivered(forward) // the status read's, late: changes nothing
	if err := at(sent+4*step, 0); err != back {
		t.Fatalf("a reading before the step back was delivered: %v; want it %v", err, back)
	}
	c.delivered(back)
	if err := at(sent+5*step, 0); err != nil {
		t.Fatalf("a reading once both were delivered: %v", err)
	}
}
