package quorum

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// marksLost is a node on which every RestartedMark record fails (its
// connection cut each time): the record is best effort.
type marksLost struct{ *fakeNode }

func (m marksLost) Do(ctx context.Context, op *Op, tag int, done Sink) {
	if op.Kind == OpFloor && op.Token == RestartedMark {
		go func() { done.Put(Reply{Tag: tag, Err: errDown}) }()
		return
	}
	m.fakeNode.Do(ctx, op, tag, done)
}

// TestAttackZHeldOutRestartThroughAnAliasThenDurable: node 2 grants
// fences up to top with node 1 (node 0 down), then restarts empty without
// fsync: held out "restarted", its record (RestartedMark) never lands.
// Its address then names node 1's server for a while (an alias), and its
// own again: the alias reset made the same lossy process "first seen,
// up 0s", no longer "restarted". Made durable and restarted keeping what
// it has, it is not unvouched (n.why is not "restarted"), its counter is
// not below the one read since the alias, and its record shows no mark:
// counted at once, x's grant on nodes 0 and 2 (node 1 down) goes back.
func TestAttackZHeldOutRestartThroughAnAliasThenDurable(t *testing.T) {
	t.Skip("known: an alias resets what the instance knew of a process held out for a lossy restart; with its RestartedMark record lost, its durable restart counts at once: fence 4 after 7")
	nodes := oldNodes(3)
	const lease = time.Second
	ns := asNodes(nodes)
	ns[2] = marksLost{nodes[2]}
	r := New(ns, Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grantedAndReleased(t, r, nodes, lease)
	nodes[0].setDown(true)
	var top int64
	for i := range 4 {
		tok := fmt.Sprintf("c%d", i)
		h := hold(tok)
		h.TTL = lease
		g, err := r.Acquire(context.Background(), "k", h)
		if err != nil {
			t.Fatal(err)
		}
		top = g.Fence
		r.Release(context.Background(), "k", tok, nil, nil)
		waitCount(t, nodes, "k", tok, 0)
	}
	nodes[0].setDown(false)
	nodes[2].restartEmpty("run2-b")
	state := func() nodeTrust {
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[2]
	}
	eventually(t, 10*time.Second, "node 2 held out for its restart", func() bool {
		n := state()
		return n.runID == "run2-b" && n.counted == "" && n.why == "restarted"
	})
	nodes[2].mu.Lock()
	nodes[2].run = nodes[1].run
	nodes[2].mu.Unlock()
	eventually(t, 10*time.Second, "node 2 seen as node 1's alias", func() bool { return state().aliasOf == 2 })
	nodes[2].mu.Lock()
	nodes[2].run = "run2-b"
	nodes[2].mu.Unlock()
	eventually(t, 10*time.Second, "node 2's own server again", func() bool {
		n := state()
		return n.runID == "run2-b" && n.aliasOf == 0
	})
	nodes[2].restartKeeping("run2-c", true)
	eventually(t, 10*time.Second, "node 2's durable restart read", func() bool { return state().runID == "run2-c" })
	nodes[1].setDown(true)
	x := hold("x")
	x.TTL = lease
	g, err := r.Acquire(context.Background(), "k", x)
	if err == nil && g.Fence <= top {
		t.Fatalf("x's grant on nodes 0 and 2: fence %d going back, after %d (node 2: %+v)", g.Fence, top, state())
	}
	if err != nil && !errors.Is(err, ErrNotCounted) {
		t.Fatalf("x's acquire: %v, want node 2 not counted", err)
	}
}

// TestAttackZCrashOfANonDurableProcessRestartedDurable: node 0, counted
// but not durable (appendonly no, RDB snapshots), holds a's lease with
// node 1 (node 2 down); a renews it for 30 s; node 0 crashes and its
// operator restarts it with appendonly yes and appendfsync always (the
// NOQUORUM reply's advice), loading its last snapshot, taken before the
// renewal: the key ends at its first lease. Verified durable, its counter
// where it was (no grant since the snapshot), vetted for the process
// before it: counted at once. Once the first lease is over, b's acquire
// on nodes 0 and 2 (node 1 down) is granted while a's renewed lease runs.
// Durability read after a restart says what the new process will keep,
// not what the one before it lost.
func TestAttackZCrashOfANonDurableProcessRestartedDurable(t *testing.T) {
	nodes := oldNodes(3)
	r := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	ctx := context.Background()
	nodes[2].setDown(true)
	a := hold("a")
	a.TTL = 300 * time.Millisecond
	if _, err := r.Acquire(ctx, "k", a); err != nil {
		t.Fatal(err)
	}
	f := nodes[0]
	f.mu.Lock()
	snap := *f.entries["k"] // the RDB snapshot: a's first lease
	f.mu.Unlock()
	if _, err := r.Extend(ctx, "k", "a", 30*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	renewed := time.Now()
	f.restartKeeping("run0-b", true)
	f.mu.Lock()
	f.entries["k"] = &snap
	f.mu.Unlock()
	eventually(t, 10*time.Second, "node 0's restart read", func() bool {
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[0].runID == "run0-b"
	})
	time.Sleep(time.Until(snap.expires) + 50*time.Millisecond)
	nodes[1].setDown(true)
	nodes[2].setDown(false)
	b := hold("b")
	b.TTL = time.Second
	_, err := r.Acquire(ctx, "k", b)
	if err == nil && time.Since(renewed) < 30*time.Second {
		t.Fatalf("b granted on nodes 0 and 2 while a's renewed lease runs on nodes 0 (lost in the crash) and 1: %+v", r.HeldOut())
	}
}
