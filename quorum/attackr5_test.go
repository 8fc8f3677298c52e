package quorum

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Attacks on the durable guards of the restart rule after attackr4
// (restart.go: nodeTrust.top raised with a floor, trust.seen, the
// RestartedMark record written again).

// TestDurableRaisedByACommitWipedHeldOut: nodes 0 and 1, verified durable,
// have small counters; node 2's is far above (a floor raised to the time
// while a node was down). x's grant takes node 2's counter as its fence,
// and its commit raises nodes 0 and 1 to it: their acquire replies carried
// only their own small counters. They then restart wiped, still durable,
// with node 2 down, and take a few grants through other instances before
// this one reads them: their counters went back below the fence, but not
// below what their acquire replies carried, lost did not fire, and the
// next grant took a fence far below x's. A counted commit reply tells the
// instance that the node's counter is at least the fence committed.
func TestDurableRaisedByACommitWipedHeldOut(t *testing.T) {
	nodes := oldNodes(3)
	for _, f := range nodes {
		f.durable = true
	}
	const lease = time.Second
	r := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: time.Hour, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grantedAndReleased(t, r, nodes, lease)
	nodes[2].mu.Lock()
	nodes[2].counter["k"] = 1_000_000
	nodes[2].mu.Unlock()
	c := hold("c")
	c.TTL = lease
	var top int64
	eventually(t, 10*time.Second, "a grant with node 2's counter as its fence", func() bool {
		g, err := r.Acquire(context.Background(), "k", c) // may decide before node 2's reply
		if err != nil {
			t.Fatal(err)
		}
		top = g.Fence
		r.Release(context.Background(), "k", "c", nil, nil)
		waitCount(t, nodes, "k", "c", 0)
		return top > 1_000_000
	})
	nodes[2].setDown(true)
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	for _, f := range nodes[:2] {
		f.mu.Lock()
		f.durable = true
		f.counter["k"] = 5 // grants through other instances before this one's read
		f.mu.Unlock()
	}
	x := hold("x")
	x.TTL = lease
	eventually(t, 10*time.Second, "the wiped restarts read", func() bool {
		r.Acquire(context.Background(), "k", x) // its replies ask for a read
		r.Release(context.Background(), "k", "x", nil, nil)
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[0].runID == "run0-b" && r.trust.nodes[1].runID == "run1-b"
	})
	g, err := r.Acquire(context.Background(), "k", x)
	if err == nil && g.Fence <= top {
		t.Fatalf("x's grant after nodes 0 and 1 restarted durable and wiped: fence %d going back, after %d", g.Fence, top)
	}
	if err != nil && !errors.Is(err, ErrNotCounted) {
		t.Fatalf("x's acquire: %v, want nodes 0 and 1 not counted", err)
	}
}
