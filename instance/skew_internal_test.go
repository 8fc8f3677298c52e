package instance

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/upstream"
)

// TestAttackSkewHeldOutWhenRecorded: a node's observer (record) sees a
// reply that carried a clock jump (here a node found off this instance's
// clock at first contact). It runs on the goroutine that delivers the
// node's replies, which reads the node's next pipeline after it returns;
// that pipeline, in step with the jumped clock, shows no jump. So the
// node must be held out once record returns, not whenever a goroutine it
// started gets to run: else the next pipeline's votes count first.
func TestAttackSkewHeldOutWhenRecorded(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	set := newNodeSet(zap.NewNop())
	nodes := make([]quorum.Node, len(servers))
	var watched []*watchedNode
	for i, s := range servers {
		w := set.add(s.Addr(), true)
		n := upstream.NewRedisNode(upstream.RedisOptions{Addr: s.Addr(), ClockSkew: time.Second, Observe: w.record})
		t.Cleanup(func() { n.Close() })
		w.Node = n
		nodes[i] = w
		watched = append(watched, w)
	}
	r := quorum.New(nodes, quorum.Config{}) // restart rule off
	t.Cleanup(func() { r.Close() })
	set.clock.Store(r)
	set.redlock = r
	for round := 0; round < 20; round++ {
		jump := &quorum.ClockJumpError{Jump: 10 * time.Second, Allowance: time.Second, First: true}
		watched[0].record(time.Millisecond, jump)
		if h := r.HeldOut(); len(h) != 1 || h[0].Node != 0 || !h[0].Clock {
			t.Fatalf("round %d: once record returned, held out: %+v; want node 0, for its clock", round, h)
		}
		r.Close() // stops the hold's timer; a fresh Redlock for the next round
		r = quorum.New(nodes, quorum.Config{})
		set.clock.Store(r)
		set.redlock = r
	}
}
