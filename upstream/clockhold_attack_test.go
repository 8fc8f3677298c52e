package upstream

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Interleavings against the clock-jump hold-out (quorum/clock.go) and the
// checks that feed it (clock.go), on real redis-servers with node 0 under
// a clock shim.

// TestAttackSkewHoldShortenedBySecondJump: TestAttackSkewRestartRuleOff,
// and then node 0's clock is set right again (stepped back the 10 s), as
// NTP does once it notices. Instance B (restart rule off) held node 0 out
// for the 10 s it was off at first contact; the step back is a second
// jump, and B's hold for it is the longest lease B granted: none. Before
// a hold could only grow, that second hold replaced the first: node 0
// counted again at once, k (dropped there by the +10 s step) was free on
// nodes 0 and 2, and B granted it to b while a's validity ran.
func TestAttackSkewHoldShortenedBySecondJump(t *testing.T) {
	const lease = 5 * time.Second
	servers, clock, _, rA := attackNodes(t, lease, nil)
	ctx := testCtx(t)
	nodes, g, start := jumpedAfterGrant(t, servers, clock, rA, lease)
	rB := quorum.New(nodes, quorum.Config{})
	t.Cleanup(func() { rB.Close() })
	try := func(what string) {
		t.Helper()
		gb, err := rB.Acquire(ctx, "k", hold("b", lease))
		if err == nil && time.Since(start) < g.Validity {
			t.Fatalf("%s: instance B (restart rule off) granted k to b (fence %d) %v into a's validity %v (a's fence %d); node 0's clock %v, held out %+v",
				what, gb.Fence, time.Since(start), g.Validity, g.Fence, nodes[0].(*RedisNode).Clock(), rB.HeldOut())
		}
		if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			t.Fatalf("%s: b: %v", what, err)
		}
	}
	try("first contact") // node 0 is 10 s off: held out for that
	if h := rB.HeldOut(); len(h) != 1 || h[0].Node != 0 || h[0].Left < 5*time.Second {
		t.Fatalf("after node 0's first reply, 10 s off: held out %+v; want node 0 for about 10 s", h)
	}
	if _, err := clock.Step(-10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
	for i := 0; i < 3; i++ {
		try("after the step back")
		time.Sleep(20 * time.Millisecond)
	}
	if c := nodes[0].(*RedisNode).Clock(); c.Jumps != 2 {
		t.Errorf("node 0's clock as B sees it: %v; want the first contact and the step back as jumps", c)
	}
}

// TestAttackJumpSeenByStatusHeldBeforeNextVote: the restart rule's status
// read goes through go-redis's pool, on a goroutine of its own, not the
// node's reader. It reads node 0's clock after a +10 s step first: that
// is the jump, and its reply's observer holds the node out (the
// instance's record). Until that observer runs, the node's reader goes on:
// an acquire read meanwhile, in step with the stepped clock, showed
// nothing and was answered as a vote, counted before the hold landed. Here
// the status's observer is held up (a goroutine descheduled between the
// two); the acquire read meanwhile must carry the jump too.
func TestAttackJumpSeenByStatusHeldBeforeNextVote(t *testing.T) {
	s, clock := clockshim.StartRedis(t, redistest.Options{})
	seen, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	observe := func(_ time.Duration, err error) {
		if errors.Is(err, quorum.ErrClockJumped) {
			blocked := false
			once.Do(func() { blocked = true })
			if blocked { // the first call to carry the jump: its observer is late
				close(seen)
				<-release
			}
		}
	}
	n := newNode(t, RedisOptions{Addr: s.Addr(), Observe: observe})
	ctx := testCtx(t)
	status := func() quorum.Reply {
		done := make(quorum.Replies, 1)
		n.Do(ctx, &quorum.Op{Kind: quorum.OpStatus}, 0, done)
		return <-done
	}
	if r := status(); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := n.Acquire(ctx, "warm", hold("a", time.Minute)); err != nil { // loads the scripts
		t.Fatal(err)
	}
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
	late := make(chan quorum.Reply, 1)
	go func() { late <- status() }()
	select {
	case <-seen:
	case <-time.After(testTimeout):
		close(release)
		t.Fatal("the status read after the step did not carry the jump")
	}
	c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
	close(release)
	if r := <-late; !errors.Is(r.Err, quorum.ErrClockJumped) {
		t.Errorf("status read after the step: %v; want the jump", r.Err)
	}
	if !errors.Is(err, quorum.ErrClockJumped) {
		t.Fatalf("acquire read after the status read saw the jump, before its observer held the node out: %+v %v; want the jump, not a vote", c, err)
	}
	if _, err := n.Acquire(ctx, "k2", hold("b", time.Minute)); err != nil {
		t.Fatalf("acquire once the status read's observer ran: %v", err)
	}
}
