package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Attacks on the restart rule's vetted floor (floor.lua's record,
// Status.Floor) and on what a verified durable node is trusted with.

// restartKeeping restarts the node as a Redis that reloads its data does
// (an AOF): a new run id and no uptime, with every key it held, its
// counters, its vetted run id and its vetted floor; durable says whether
// it now runs with appendfsync always (an operator who turned it on).
func (f *fakeNode) restartKeeping(run string, durable bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.run, f.uptime, f.durable = run, 0, durable
}

// makeDurable is CONFIG SET appendonly yes, appendfsync always on the
// running process: no restart.
func (f *fakeNode) makeDurable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.durable = true
}

// lostFences grants fences up to the returned top on nodes 0 and 1 only
// (node 2 down), then restarts both empty: only node 2, which missed
// them, still has a counter. It returns once r holds both out and an
// instance seeing their restart recorded it on them (RestartedMark).
func lostFences(t *testing.T, r *Redlock, nodes []*fakeNode, lease time.Duration) (top int64) {
	t.Helper()
	grantedAndReleased(t, r, nodes, lease)
	nodes[2].setDown(true)
	top = grantedInTurn(t, r, nodes, lease, 4)
	nodes[2].setDown(false)
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	eventually(t, 10*time.Second, "both seen restarted", func() bool {
		return slices.Equal(r.Counted(), []bool{false, false, true})
	})
	eventually(t, 10*time.Second, "the restart recorded on both", func() bool {
		_, v0 := nodes[0].raised()
		_, v1 := nodes[1].raised()
		return v0 == RestartedMark && v1 == RestartedMark
	})
	return top
}

// grantAbove grants token's lease on "k" through r, as soon as r can,
// and checks its fence is above top, every fence granted before.
func grantAbove(t *testing.T, r *Redlock, token string, lease time.Duration, top int64, what string) {
	t.Helper()
	h := hold(token)
	h.TTL = lease
	var g engine.Grant
	eventually(t, 20*time.Second, what, func() bool {
		var err error
		g, err = r.Acquire(context.Background(), "k", h)
		return err == nil
	})
	if g.Fence <= top {
		t.Fatalf("%s: fence %d going back, after %d", what, g.Fence, top)
	}
}

// TestDurableWhileHeldOutNotCountedAtOnce: nodes 0 and 1 alone record
// fences up to top and restart empty; instance A holds them out. Their
// operator, told they restarted "without verified fsync", turns
// appendfsync always on (CONFIG SET, no restart). Instance B, started
// now, finds them verified durable: it counted them at once, with the
// counters they have since the restart (no floor raised): a grant of k
// by nodes 0 and 1 with fence 1, after top. A durable process that lost
// what it held before it was durable has not lost nothing: a node whose
// record says an instance saw it restart without fsync (RestartedMark)
// is held out as any restarted node, and counted once its floor is
// raised.
func TestDurableWhileHeldOutNotCountedAtOnce(t *testing.T) {
	nodes := oldNodes(3)
	const lease = time.Second
	a := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer a.Close()
	top := lostFences(t, a, nodes, lease)
	nodes[0].makeDurable()
	nodes[1].makeDurable()
	b := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer b.Close()
	grantAbove(t, b, "x", lease, top, "x's grant through B")
}

// TestDurableRestartOfAHeldOutProcess: as
// TestDurableWhileHeldOutNotCountedAtOnce, with nodes 0 and 1 restarted
// again, durable, before their floors were raised: each new process
// reloads what the held-out one had (its counter since the empty
// restart, below top). Instance A, which held them out, saw a durable
// restart and counted them at once: x's grant took fence 1 after top.
func TestDurableRestartOfAHeldOutProcess(t *testing.T) {
	nodes := oldNodes(3)
	const lease = time.Second
	a := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer a.Close()
	top := lostFences(t, a, nodes, lease)
	nodes[0].restartKeeping("run0-c", true)
	nodes[1].restartKeeping("run1-c", true)
	grantAbove(t, a, "x", lease, top, "x's grant through A")
}

// TestStaleHoldKeptByADurableRestart: staleHoldStage (b's hold left on
// nodes 0 and 1 before their floors were raised, fence 1 after top),
// then nodes 0 and 1 turn appendfsync always on and restart within the
// hold's lease: the new processes reload b's holds and the record of the
// floors, which names the process before. Counted at once as durable,
// they were taken to hold nothing from before a floor: b's retry, through
// the instance that raised them or one started after, found its holds a
// majority with fence 1 and answered it. A durable restart keeps what the
// process before it kept: its holds from before its floor too. The
// instance that counted that process keeps its bound; one that did not
// takes the record the node keeps, whichever process it names. Where the
// node keeps none (norecord: a build before the record raised it first),
// the instance that counted the process keeps the bound it took.
func TestStaleHoldKeptByADurableRestart(t *testing.T) {
	for _, c := range []struct{ later, norecord bool }{{false, false}, {true, false}, {false, true}} {
		later := c.later
		t.Run(fmt.Sprintf("later=%v,norecord=%v", c.later, c.norecord), func(t *testing.T) {
			ctx := context.Background()
			nodes, r, top := staleHoldStage(t, nil)
			if c.norecord {
				for _, f := range nodes[:2] {
					f.mu.Lock()
					f.raisedAt, f.raisedFor = 0, ""
					f.mu.Unlock()
				}
			}
			nodes[0].restartKeeping("run0-c", true)
			nodes[1].restartKeeping("run1-c", true)
			if later {
				r = New(asNodes(nodes), staleHoldConfig)
				t.Cleanup(func() { r.Close() })
			}
			eventually(t, 10*time.Second, "the durable restarts counted", func() bool {
				r.trust.mu.RLock()
				defer r.trust.mu.RUnlock()
				return r.trust.nodes[0].counted == "run0-c" && r.trust.nodes[1].counted == "run1-c"
			})
			if !nodes[0].holds("k", "b") || !nodes[1].holds("k", "b") {
				t.Fatal("b's holds expired before its retry: the stage does not test")
			}
			g, err := r.Acquire(ctx, "k", staleHold("b"))
			if err != nil {
				t.Fatal(err)
			}
			if g.Fence <= top {
				t.Fatalf("b's retry after nodes 0 and 1 restarted durable: fence %d going back, after %d", g.Fence, top)
			}
		})
	}
}

// TestLockInfoOfAStaleHold: staleHoldStage leaves b's holds on nodes 0
// and 1 from before their floors, with fence 1 after top. Inspect
// (LOCKINFO) found b holding k on a majority that agrees on fence 1 and
// showed it: a fence below one already granted, which b's retry then
// does not answer either (it commits one above every counter). A fence
// recorded only by holds that may predate their node's floor is not
// known: LOCKINFO shows b's hold with fence 0, as a holder lockproxy did
// not write, until b's retry commits a fence (shown then) or its holds
// expire.
func TestLockInfoOfAStaleHold(t *testing.T) {
	ctx := context.Background()
	_, r, top := staleHoldStage(t, nil)
	h, ok, err := r.Inspect(ctx, "k")
	if err != nil || !ok || h.Token != "b" {
		t.Fatalf("LOCKINFO of b's holds from before the floors: %+v %v %v, want b's", h, ok, err)
	}
	if h.Fence != 0 {
		t.Fatalf("LOCKINFO of b's holds from before the floors: fence %d (going back after %d), want 0: not known", h.Fence, top)
	}
	g, err := r.Acquire(ctx, "k", staleHold("b"))
	if err != nil {
		t.Fatal(err)
	}
	h, ok, err = r.Inspect(ctx, "k")
	if err != nil || !ok || h.Token != "b" || h.Fence != g.Fence {
		t.Fatalf("LOCKINFO after b's retry (fence %d): %+v %v %v", g.Fence, h, ok, err)
	}
}

// TestLockInfoOfAGrantMadeDuringAHoldOut: b is granted by nodes 1 and 2
// while node 0 is held out (node 0 takes the key too, its fence raised
// to the grant's by the commit, below the counter recorded with its
// floor); once node 0 counts again, node 2 goes down. LOCKINFO shows b's
// grant's fence, which node 1, never restarted, records beside node 0:
// only a fence that no hold from after a floor records is unknown.
// (Setting node 0's hold aside altogether would leave node 1's alone, no
// majority: LOCKINFO would say free while b holds k.)
func TestLockInfoOfAGrantMadeDuringAHoldOut(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 3 * time.Second
	r := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grantedAndReleased(t, r, nodes, lease)
	nodes[0].restartEmpty("run0-b")
	eventually(t, 10*time.Second, "node 0 seen restarted", func() bool {
		return slices.Equal(r.Counted(), []bool{false, true, true})
	})
	eventually(t, 10*time.Second, "the hold-out nearly over", func() bool {
		h := r.HeldOut()
		return len(h) > 0 && h[0].Node == 0 && h[0].Left < lease/3
	})
	b := hold("b")
	b.TTL = lease
	g, err := r.Acquire(ctx, "k", b)
	if err != nil {
		t.Fatal(err)
	}
	waitCount(t, nodes, "k", "b", 3)
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return r.Counted()[0] })
	if !r.staleHold(0, g.Fence) {
		t.Fatalf("b's hold on node 0 (fence %d) not below its floor: the stage does not test", g.Fence)
	}
	nodes[2].setDown(true)
	h, ok, err := r.Inspect(ctx, "k")
	if err != nil || !ok || h.Token != "b" || h.Fence != g.Fence {
		t.Fatalf("LOCKINFO of b's grant (fence %d) on nodes 0 and 1: %+v %v %v", g.Fence, h, ok, err)
	}
}

// TestDurableRestartThatLostItsDataHeldOut: nodes 0 and 1, verified
// durable, alone record fences up to top; both restart with nothing
// (their appendonly files lost: a new volume, a wiped disk) and still
// appendfsync always. Counted at once as durable, they granted x fence 1
// after top. A restarted node whose counter went back since the last read
// lost what it had, whatever its configuration says: it is held out as
// one restarted without fsync.
func TestDurableRestartThatLostItsDataHeldOut(t *testing.T) {
	nodes := oldNodes(3)
	for _, f := range nodes {
		// Counters far above what the acquires sent to a wiped node
		// before the status read they ask for can bring it back to.
		f.durable, f.floor = true, 1000
	}
	const lease = time.Second
	r := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grantedAndReleased(t, r, nodes, lease)
	nodes[2].setDown(true)
	top := grantedInTurn(t, r, nodes, lease, 4)
	nodes[2].setDown(false)
	eventually(t, 10*time.Second, "the counters read", func() bool {
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[0].top == top && r.trust.nodes[1].top == top
	})
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	grantAbove(t, r, "x", lease, top, "x's grant after nodes 0 and 1 restarted durable with nothing")
}

// TestRetryOfAGrantHealedOntoANodeAfterItsTimeFloor: node 0 restarts
// empty while node 2 is down, so its floor is the time (about 1.7·10^15,
// the counter it records). b is then granted by nodes 1 and 2 while node
// 0 is unreachable, with a small fence, and b's renewal heals it onto
// node 0 (heal.lua writes the grant's fence; written here as it leaves
// it). Node 2 goes down: b's retry finds its holds on nodes 0 and 1, both
// from its grant, made after node 0's floor; node 0's is below the
// counter node 0 recorded and is set aside, node 1's alone is no
// majority, and the retry commits a new fence (never going back, but not
// its grant's).
func TestRetryOfAGrantHealedOntoANodeAfterItsTimeFloor(t *testing.T) {
	t.Skip("known (attackr3): a hold healed onto a node after its floor with a fence below the counter the node recorded " +
		"is set aside like one from before it: b's retry with node 2 down commits a new fence (1795911499027592 after its grant's 4); " +
		"telling them apart needs the node to record which holds were written after its floor")
	nodes := oldNodes(3)
	const lease = time.Second
	r := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grantedAndReleased(t, r, nodes, lease)
	nodes[2].setDown(true)
	nodes[0].restartEmpty("run0-b")
	eventually(t, 10*time.Second, "node 0 seen restarted", func() bool { return !r.Counted()[0] })
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return r.Counted()[0] })
	if s := nodes[0].status(); s.Floor < time.Now().Add(-time.Hour).UnixMicro() {
		t.Fatalf("node 0's recorded floor %d: not the time, the stage does not test", s.Floor)
	}
	nodes[2].setDown(false)
	nodes[0].setDown(true)
	b := hold("b")
	b.TTL = lease
	g, err := r.Acquire(context.Background(), "k", b)
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].setDown(false)
	f := nodes[0]
	f.mu.Lock()
	f.entries["k"] = &fakeEntry{Entry{Token: "b", Fence: g.Fence, Mode: b.Mode, Name: b.Name}, b.TTL, time.Now().Add(b.TTL), g.Attempt, false}
	f.mu.Unlock()
	nodes[2].setDown(true)
	retryAnswers(t, r, b, g.Fence, "b's retry with its grant healed onto node 0")
}

// noMarks is a node whose RestartedMark records fail (a connection cut
// just then): the mark is best effort.
type noMarks struct{ *fakeNode }

func (m noMarks) Do(ctx context.Context, op *Op, tag int, done Sink) {
	if op.Kind == OpFloor && op.Token == RestartedMark {
		go func() { done.Put(Reply{Tag: tag, Err: errDown}) }()
		return
	}
	m.fakeNode.Do(ctx, op, tag, done)
}

// TestDurableRestartOfAHeldOutProcessUnmarked: as
// TestDurableRestartOfAHeldOutProcess, with A's records of the restart
// lost: the node's record does not say it, but A held the process before
// out itself, and vouches for nothing it reloads: it holds the durable
// process out too (x's grant took fence 5 after 7 when A counted it).
func TestDurableRestartOfAHeldOutProcessUnmarked(t *testing.T) {
	nodes := oldNodes(3)
	const lease = time.Second
	ns := asNodes(nodes)
	ns[0], ns[1] = noMarks{nodes[0]}, noMarks{nodes[1]}
	a := New(ns, Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer a.Close()
	grantedAndReleased(t, a, nodes, lease)
	nodes[2].setDown(true)
	top := grantedInTurn(t, a, nodes, lease, 4)
	nodes[2].setDown(false)
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	eventually(t, 10*time.Second, "both seen restarted", func() bool {
		return slices.Equal(a.Counted(), []bool{false, false, true})
	})
	nodes[0].restartKeeping("run0-c", true)
	nodes[1].restartKeeping("run1-c", true)
	eventually(t, 10*time.Second, "the durable restarts read", func() bool {
		a.trust.mu.RLock()
		defer a.trust.mu.RUnlock()
		return a.trust.nodes[0].runID == "run0-c" && a.trust.nodes[1].runID == "run1-c"
	})
	x := hold("x")
	x.TTL = lease
	g, err := a.Acquire(context.Background(), "k", x)
	if err == nil && g.Fence <= top {
		t.Fatalf("x's grant through A: fence %d going back, after %d", g.Fence, top)
	}
	if err != nil && !errors.Is(err, ErrNotCounted) {
		t.Fatalf("x's acquire through A: %v, want nodes 0 and 1 not counted", err)
	}
}

// grantedInTurn grants k to c0 … c(n−1) through a in turn, each released
// and gone from every node before the next, and returns the last fence.
func grantedInTurn(t *testing.T, a *Redlock, nodes []*fakeNode, lease time.Duration, n int) int64 {
	t.Helper()
	var top int64
	for i := range n {
		tok := fmt.Sprintf("c%d", i)
		h := hold(tok)
		h.TTL = lease
		g, err := a.Acquire(context.Background(), "k", h)
		if err != nil {
			t.Fatal(err)
		}
		top = g.Fence
		a.Release(context.Background(), "k", tok, nil, nil)
		waitCount(t, nodes, "k", tok, 0)
	}
	return top
}
