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

// Attacks on the heal's wait after a node lost its metas (healsFrom,
// e62b71e, 27b5c9f, and the merge 56ae5f2's start of a durable restart).

// x3Scene is TestAttackX2RestartLosesTheReleasesMeta's scene: three nodes
// (counters 9) that report run ids, an hour's uptime, and that they were
// vetted; a (fence 10, a 1 s lease) renewed through A (max_lease_ms
// 1000); a's release through C (node_timeout_ms 5000: a grace of 11 s)
// deletes a on node 2 at once and is held on its way to node 0, C's link
// to node 1 cut. Until the release lands on node 0, a is renewed on nodes
// 0 and 1; once it lands, C decides it (nodes 0 and 2). A heal of node 2
// for a from a renewal meanwhile gives a, released, nodes 1 and 2.
type x3Scene struct {
	fs       []*fakeNode
	nodes    []Node
	cfg      Config
	rA, rC   *Redlock
	c0       *link
	sent     time.Time
	released chan error
}

func newX3Scene(t *testing.T) *x3Scene {
	t.Helper()
	ctx := context.Background()
	fs, hs := newHealNodes(3)
	x := &x3Scene{fs: fs, nodes: make([]Node, 3), released: make(chan error, 1)}
	for i, f := range fs {
		f.run, f.uptime, f.vetted = fmt.Sprintf("run%d", i), time.Hour, fmt.Sprintf("run%d", i)
		f.counter["k"] = 9
		x.nodes[i] = incarnate{hs[i]}
	}
	var c1 *link
	x.c0, c1 = newLink(x.nodes[0]), newLink(x.nodes[1])
	x.cfg = Config{MaxLease: time.Second, StatusEvery: 10 * time.Millisecond}
	x.rA = New(x.nodes, x.cfg)
	cfgC := x.cfg
	cfgC.NodeTimeout = 5 * time.Second
	x.rC = New([]Node{x.c0, c1, x.nodes[2]}, cfgC)
	t.Cleanup(func() {
		x.c0.let()
		x.rA.Close()
		x.rC.Close()
	})
	eventually(t, 5*time.Second, "every node counted", func() bool {
		return slices.Equal(x.rA.Counted(), []bool{true, true, true}) && slices.Equal(x.rC.Counted(), []bool{true, true, true})
	})
	ga, err := x.rA.Acquire(ctx, "k", engine.Hold{Token: "a", TTL: time.Second, Mode: engine.Lease})
	if err != nil || ga.Fence != 10 {
		t.Fatalf("a: %+v %v, want 10", ga, err)
	}
	waitFor(t, "a on every node", func() bool { return holders(fs, "k", "a") == 3 })
	x.c0.hold(OpRelease)
	c1.setCut(true)
	x.sent = time.Now()
	go func() {
		ok, err := x.rC.Release(ctx, "k", "a", nil, nil)
		if err == nil && !ok {
			err = errors.New("not held")
		}
		x.released <- err
	}()
	waitFor(t, "the release deletes a on node 2", func() bool { return !fs[2].holds("k", "a") && x.c0.heldCalls() == 1 })
	return x
}

// renew renews a through r until cond holds (nil: never), and no longer
// than until after the release was sent.
func (x *x3Scene) renew(t *testing.T, r *Redlock, until time.Duration, cond func() bool) {
	t.Helper()
	for time.Since(x.sent) < until && (cond == nil || !cond()) {
		if _, err := r.Extend(context.Background(), "k", "a", time.Second, ""); err != nil {
			t.Fatalf("a's renewal, %v after the release was sent: %v", time.Since(x.sent), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if time.Since(x.sent) > 4*time.Second {
		t.Fatalf("the scene took %v: the release would have timed out on node 0 (a loaded host?)", time.Since(x.sent))
	}
}

// restartEmpty restarts node 2 empty (run2-b) and waits for A to see it.
func (x *x3Scene) restartEmpty(t *testing.T) {
	t.Helper()
	x.fs[2].restartEmpty("run2-b")
	eventually(t, time.Second, "A sees node 2 restart", func() bool {
		x.rA.trust.mu.RLock()
		defer x.rA.trust.mu.RUnlock()
		return x.rA.trust.nodes[2].runID == "run2-b"
	})
}

// land lets the release land on node 0, wants it decided, and wants node
// 2 not to hold a again, nor LOCKINFO through r to show a.
func (x *x3Scene) land(t *testing.T, r *Redlock) {
	t.Helper()
	x.c0.let()
	if err := <-x.released; err != nil {
		t.Fatalf("a's release through C, decided by nodes 0 and 2: %v", err)
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if tok, f, _ := entryOf(x.fs[2], "k"); tok == "a" {
			t.Errorf("node 2 holds a again after a's release there, with fence %d", f)
			break
		}
	}
	if h, ok, err := r.Inspect(context.Background(), "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release: a holds it with fence %d", h.Fence)
	}
}

// TestAttackX3ClockJumpDropsTheReleasesMeta: a node whose clock steps
// forward drops its keys early, the meta a release left there too, as a
// restart without fsync loses it; the clock hold-out lasts max_lease_ms
// (1 s), less than the grace. a's release through C deletes a on node 2,
// then node 2's clock steps an hour forward (its blank meta is gone); A
// holds it out for 1 s, then counts it again while the release is still
// on its way to node 0, and its renewal of a finds node 2 free with no
// meta. Seen failing before the clock hold noted when the node dropped
// its metas (healsFrom took only the restart's start): the heal took node
// 2 for a, released, with fence 10, and LOCKINFO showed a.
func TestAttackX3ClockJumpDropsTheReleasesMeta(t *testing.T) {
	x := newX3Scene(t)
	x.fs[2].mu.Lock()
	delete(x.fs[2].metas, "k") // the step forward ended it
	x.fs[2].mu.Unlock()
	x.rA.NoteClock(2, &ClockJumpError{Jump: time.Hour, Most: time.Hour, Allowance: 10 * time.Millisecond})
	if x.rA.Counted()[2] {
		t.Fatal("node 2 counted right after its clock jumped")
	}
	x.renew(t, x.rA, 2500*time.Millisecond, nil)
	if !x.rA.Counted()[2] {
		t.Fatal("node 2 still held out 2.5 s after its clock jumped (max_lease_ms 1000)")
	}
	x.land(t, x.rA)
}

// TestAttackX3FirstSeenDurableAfterAnEmptyRestart: an instance started
// after a node restarted empty, and was made durable (CONFIG SET appendonly
// yes, appendfsync always) once A had counted it again, first sees it
// verified durable and vetted for the process: it counts it at once, as
// it should, but the process lost the metas at its start all the same.
// B's renewals, within the grace of node 2's start and while a's release
// is still on its way to node 0, must not heal node 2. Seen failing
// before a node first seen got a start whether durable or not (the start
// was set only for one not verified durable): B healed node 2 for a,
// released, with fence 10, and LOCKINFO showed a.
func TestAttackX3FirstSeenDurableAfterAnEmptyRestart(t *testing.T) {
	x := newX3Scene(t)
	x.restartEmpty(t)
	x.renew(t, x.rA, 2500*time.Millisecond, func() bool { return x.rA.Counted()[2] })
	if !x.rA.Counted()[2] {
		t.Fatal("A did not count node 2 again 2.5 s after its restart (max_lease_ms 1000)")
	}
	if f, v := x.fs[2].raised(); v != "run2-b" {
		t.Fatalf("node 2's record after A counted it again: floor %d vetted %q, want run2-b", f, v)
	}
	x.fs[2].makeDurable()
	rB := New(x.nodes, x.cfg)
	defer rB.Close()
	if !slices.Equal(rB.Counted(), []bool{true, true, true}) {
		t.Fatalf("B, first seeing node 2 durable and vetted, counts %v, want every node", rB.Counted())
	}
	x.renew(t, rB, 3*time.Second, nil)
	x.land(t, rB)
}

// TestAttackX3DurableRestartKeepsTheEmptyRestartsStart: node 2 restarts
// empty (it loses the release's meta), A counts it again after max_lease_ms,
// it is made durable and restarts again, keeping what it had: A counts it
// at once, and its heal wait still runs from the empty restart. A renewal
// within the grace of the empty restart, while the release is still on
// its way to node 0, heals nothing there. Seen failing with the durable
// restart resetting the start (as before the merge 56ae5f2): the heal took
// node 2 for a, released.
func TestAttackX3DurableRestartKeepsTheEmptyRestartsStart(t *testing.T) {
	x := newX3Scene(t)
	x.restartEmpty(t)
	x.renew(t, x.rA, 2500*time.Millisecond, func() bool { return x.rA.Counted()[2] })
	if !x.rA.Counted()[2] {
		t.Fatal("A did not count node 2 again 2.5 s after its restart (max_lease_ms 1000)")
	}
	x.fs[2].restartKeeping("run2-c", true)
	x.renew(t, x.rA, 3*time.Second, nil)
	x.rA.trust.mu.RLock()
	run := x.rA.trust.nodes[2].counted
	x.rA.trust.mu.RUnlock()
	if run != "run2-c" {
		t.Fatalf("A counts node 2's process %q after its durable restart, want run2-c", run)
	}
	x.land(t, x.rA)
}
