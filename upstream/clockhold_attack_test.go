package upstream

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
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
