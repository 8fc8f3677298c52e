package quorum

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// Attacks on the durable guards of the restart rule (restart.go's
// observe: lost, unvouched, the RestartedMark record).

// crashAfterRaise is a node that crashes right after its first fence
// floor raise: every call fails from then on, as on a process gone,
// until the test brings it up again.
type crashAfterRaise struct {
	*fakeNode
	crashed atomic.Bool
}

func (c *crashAfterRaise) Do(ctx context.Context, op *Op, tag int, done Sink) {
	if op.Kind != OpFloor || op.Fence <= 0 {
		c.fakeNode.Do(ctx, op, tag, done)
		return
	}
	inner := make(Replies, 1)
	c.fakeNode.Do(ctx, op, tag, inner)
	go func() {
		rep := <-inner
		if rep.Err == nil && rep.OK && c.crashed.CompareAndSwap(false, true) {
			c.setDown(true)
		}
		done.Put(rep)
	}()
}

// TestWipedRightAfterItsFloorHeldOut: nodes 0 and 1 restart empty with
// node 2 down (fences up to top lost with them); the instance holds them
// out and raises their floors to the time. Each crashes right after its
// raise, before a status read sees the raised counter, and comes back
// durable with its disk wiped: no counter, no vetted record. The instance
// read their counters last while they were held out: 0, nothing went
// back, and it counted both at once: x's grant, node 2 down, took fence 1
// after top. A raise tells the instance the process's counter is at least
// the floor: its last read counter (nodeTrust.top) is raised with it.
func TestWipedRightAfterItsFloorHeldOut(t *testing.T) {
	nodes := oldNodes(3)
	const lease = time.Second
	crash := []*crashAfterRaise{{fakeNode: nodes[0]}, {fakeNode: nodes[1]}}
	ns := asNodes(nodes)
	ns[0], ns[1] = crash[0], crash[1]
	r := New(ns, Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grantedAndReleased(t, r, nodes, lease)
	h := hold("a")
	h.TTL = lease
	g, err := r.Acquire(context.Background(), "k", h)
	if err != nil {
		t.Fatal(err)
	}
	top := g.Fence
	r.Release(context.Background(), "k", "a", nil, nil)
	waitCount(t, nodes, "k", "a", 0)
	nodes[2].setDown(true)
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	eventually(t, 10*time.Second, "both seen restarted", func() bool {
		return slices.Equal(r.Counted(), []bool{false, false, true})
	})
	eventually(t, 10*time.Second, "both raised, crashed, and counted", func() bool {
		return crash[0].crashed.Load() && crash[1].crashed.Load() && slices.Equal(r.Counted(), []bool{true, true, true})
	})
	for i, f := range nodes[:2] {
		f.restartEmpty([]string{"run0-c", "run1-c"}[i])
		f.mu.Lock()
		f.durable = true
		f.mu.Unlock()
		f.setDown(false)
	}
	grantAbove(t, r, "x", lease, top, "x's grant after nodes 0 and 1 came back wiped, durable")
}

// firstMarkLost is a node whose first RestartedMark record fails (a
// connection cut just then), and that counts the status reads sent to it.
type firstMarkLost struct {
	*fakeNode
	lost  atomic.Bool  // the first mark was refused
	reads atomic.Int64 // status reads since
}

func (m *firstMarkLost) Do(ctx context.Context, op *Op, tag int, done Sink) {
	switch {
	case op.Kind == OpFloor && op.Token == RestartedMark && m.lost.CompareAndSwap(false, true):
		go func() { done.Put(Reply{Tag: tag, Err: errDown}) }()
		return
	case op.Kind == OpStatus && m.lost.Load():
		m.reads.Add(1)
	}
	m.fakeNode.Do(ctx, op, tag, done)
}

// TestDurableWhileHeldOutMarkLostOnce: as
// TestDurableWhileHeldOutNotCountedAtOnce, with instance A's first record
// of each restart (RestartedMark) lost. A went on holding both nodes out
// and never wrote the record again: instance B, started once their
// operator turned appendfsync always on, found them durable with no
// record and counted them at once (x's grant: fence 2 after 7). The
// record is what tells every other instance, and an operator's start on
// new nodes, that the process lost data: A writes it again at each read
// that does not show it, while it holds the process out.
func TestDurableWhileHeldOutMarkLostOnce(t *testing.T) {
	nodes := oldNodes(3)
	const lease = time.Second
	ns := asNodes(nodes)
	flaky := []*firstMarkLost{{fakeNode: nodes[0]}, {fakeNode: nodes[1]}}
	ns[0], ns[1] = flaky[0], flaky[1]
	a := New(ns, Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer a.Close()
	grantedAndReleased(t, a, nodes, lease)
	nodes[2].setDown(true)
	top := grantedInTurn(t, a, nodes, lease, 4)
	nodes[2].setDown(false)
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	eventually(t, 10*time.Second, "both seen restarted, their first marks lost, and read again", func() bool {
		return slices.Equal(a.Counted(), []bool{false, false, true}) && flaky[0].reads.Load() > 5 && flaky[1].reads.Load() > 5
	})
	nodes[0].makeDurable()
	nodes[1].makeDurable()
	b := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer b.Close()
	grantAbove(t, b, "x", lease, top, "x's grant through B")
}

// TestDurableWipedBeforeItsCounterWasRead: nodes 0 and 1, verified
// durable, grant fences up to top after the instance last read their
// counters (here its reads are an hour apart; at the default, a second of
// grants), then restart wiped, still durable, with node 2 down. Their
// counters went back below top, but not below the one read: lost did not
// fire, and x's grant took fence 2 after 7. The counters that the
// process's counted replies carried since count as read.
func TestDurableWipedBeforeItsCounterWasRead(t *testing.T) {
	nodes := oldNodes(3)
	for _, f := range nodes {
		f.durable = true
	}
	const lease = time.Second
	r := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: time.Hour, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grantedAndReleased(t, r, nodes, lease)
	nodes[2].setDown(true)
	top := grantedInTurn(t, r, nodes, lease, 4)
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	for _, f := range nodes[:2] {
		f.mu.Lock()
		f.durable = true
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

// TestDurableRestartAfterAnAliasNotLost: node 1 carries counters up to
// top in its counted replies, then its address names node 0's server (an
// alias: not counted), then a server of its own, new and verified durable
// (first seen: counted at once), which restarts keeping its data. Its
// counter is below what the replies of the first server carried: taken
// for a loss (lost), the durable restart was held out for max_lease_ms. A
// server first seen starts with nothing carried.
func TestDurableRestartAfterAnAliasNotLost(t *testing.T) {
	nodes := oldNodes(3)
	r := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	eventually(t, 10*time.Second, "a counter carried by node 1's counted replies", func() bool {
		grantedAndReleased(t, r, nodes, time.Second) // its reply may come after a majority's
		return r.trust.seen[1].Load() > 0
	})
	f := nodes[1]
	f.mu.Lock()
	f.run = nodes[0].run
	f.mu.Unlock()
	eventually(t, 10*time.Second, "node 1 seen as node 0's alias", func() bool {
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[1].aliasOf == 1
	})
	f.restartEmpty("run1-x")
	f.mu.Lock()
	f.durable = true
	f.mu.Unlock()
	eventually(t, 10*time.Second, "node 1's own server counted", func() bool { return r.Counted()[1] })
	f.restartKeeping("run1-y", true)
	eventually(t, 10*time.Second, "node 1's durable restart read", func() bool {
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[1].runID == "run1-y"
	})
	if !r.Counted()[1] {
		t.Fatalf("node 1's durable restart, which kept its data, held out: %+v", r.HeldOut())
	}
}
