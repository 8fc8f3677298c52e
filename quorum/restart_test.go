package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Failure paths of the restart rule over fakes; upstream/restart_test.go
// runs it on real redis-servers.

// oldNodes are n fake nodes that have run for an hour, already vetted: the
// restart rule counts them from the start.
func oldNodes(n int) []*fakeNode {
	nodes := newFakeNodes(n)
	for i, f := range nodes {
		f.run, f.uptime = fmt.Sprintf("run%d", i), time.Hour
		f.vetted = f.run
	}
	return nodes
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, within)
		}
	}
}

// TestRestartedMajorityNotCountedAtOnce: two of three nodes restart empty
// between status reads. Their own replies carry their new run ids, so the
// very next acquire is not granted by them: NOQUORUM, naming them, although
// the status read that would notice is an hour away.
func TestRestartedMajorityNotCountedAtOnce(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	r := New(asNodes(nodes), Config{MaxLease: time.Minute, StatusEvery: time.Hour})
	defer r.Close()
	if c := r.Counted(); !slices.Equal(c, []bool{true, true, true}) {
		t.Fatalf("old vetted nodes counted %v", c)
	}
	if _, err := r.Acquire(ctx, "k", hold("a")); err != nil {
		t.Fatal(err)
	}
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	_, err := r.Acquire(ctx, "k", hold("b"))
	if !errors.Is(err, engine.ErrNoQuorum) || !errors.Is(err, ErrNotCounted) {
		t.Fatalf("acquire with two of three nodes restarted empty: %v", err)
	}
	// The replies asked for a status read: both are now known restarted.
	eventually(t, 10*time.Second, "the restarts noticed", func() bool {
		return slices.Equal(r.Counted(), []bool{false, false, true})
	})
	if _, err := r.Extend(ctx, "k", "a", 0, ""); !errors.Is(err, engine.ErrNoQuorum) {
		t.Fatalf("extend with two of three not counted: %v", err)
	}
}

// TestFenceFloorWhenTheLastFenceIsLost: fence 2 was recorded only on nodes
// 0 and 1 (node 2 was down), and both restart empty. Nobody counted knows
// fence 2, so when they are counted again their floor is the time in
// microseconds, and the next grant's fence is above 2 — not 2 again, as
// counters raised from node 2 alone would give.
func TestFenceFloorWhenTheLastFenceIsLost(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 200 * time.Millisecond
	r := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond})
	defer r.Close()
	grant := func(tok string) int64 {
		t.Helper()
		h := hold(tok)
		h.TTL = lease
		var g engine.Grant
		eventually(t, 10*time.Second, "grant to "+tok, func() bool {
			var err error
			g, err = r.Acquire(ctx, "k", h)
			return err == nil
		})
		if ok, err := r.Release(ctx, "k", tok, nil, nil); !ok || err != nil {
			t.Fatal(ok, err)
		}
		waitCount(t, nodes, "k", tok, 0) // the release's last call lands before the next grant
		return g.Fence
	}
	fa := grant("a")
	nodes[2].setDown(true)
	fc := grant("c") // recorded on nodes 0 and 1 only
	nodes[2].setDown(false)
	if top := nodes[2].status().FenceMax; top >= fc {
		t.Fatalf("node 2 knows fence %d of c (%d), a's was %d", top, fc, fa)
	}
	// Both restart before either is counted again. Restarted one after
	// the other, a test stalled for a lease between the two (a loaded
	// machine) lets node 0 be counted while node 1 still knows fence c:
	// its floor is then c's fence, rightly, with no time in it. Down
	// meanwhile, neither is seen until both have restarted; a node still
	// down when the other's lease has run is not counted toward its floor.
	before := time.Now().UnixMicro()
	nodes[0].setDown(true)
	nodes[1].setDown(true)
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	nodes[0].setDown(false)
	nodes[1].setDown(false)
	eventually(t, 10*time.Second, "every node counted again", func() bool {
		return slices.Equal(r.Counted(), []bool{true, true, true})
	})
	if f := grant("b"); f <= fc || f < before {
		t.Fatalf("fence after the last fence was lost: %d (want above c's %d, from a floor of at least %d)", f, fc, before)
	}
}

// TestFenceFloorFromTheOthers: one node restarts empty; the two others,
// counted, know every fence, so its floor is their largest counter and
// fences go on from there, without a jump.
func TestFenceFloorFromTheOthers(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 200 * time.Millisecond
	r := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond})
	defer r.Close()
	h := hold("a")
	h.TTL = lease
	for i := range 5 {
		if _, err := r.Acquire(ctx, "k", h); err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
			t.Fatal(ok, err)
		}
		waitCount(t, nodes, "k", "a", 0) // the release's last call lands before the next grant
	}
	top := max(nodes[0].status().FenceMax, nodes[2].status().FenceMax)
	nodes[1].restartEmpty("run1-b")
	eventually(t, 10*time.Second, "node 1 raised and counted again", func() bool {
		floor, vetted := nodes[1].raised()
		return vetted == "run1-b" && r.Counted()[1] && floor == top
	})
	nodes[2].setDown(true) // nodes 0 and 1 make the next grant
	g, err := r.Acquire(ctx, "k", h)
	if err != nil || g.Fence != top+1 {
		t.Fatalf("grant on nodes 0 and 1 after node 1's return: %+v %v (want fence %d)", g, err, top+1)
	}
}

// TestYoungNodesWaitUnlessDurable: first seen a second after they started,
// nodes without verified fsync are not counted until a lease has passed
// since their start; durable ones are counted at once.
func TestYoungNodesWaitUnlessDurable(t *testing.T) {
	nodes := newFakeNodes(3)
	for i, f := range nodes {
		f.run, f.uptime = fmt.Sprintf("run%d", i), time.Second
	}
	nodes[0].durable = true
	r := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond})
	defer r.Close()
	if c := r.Counted(); !slices.Equal(c, []bool{true, false, false}) {
		t.Fatalf("counted %v", c)
	}
	if _, err := r.Acquire(context.Background(), "k", hold("a")); !errors.Is(err, engine.ErrNoQuorum) {
		t.Fatalf("acquire with one node counted: %v", err)
	}
}

// TestUptimeMayReadASecondLong: Redis's uptime_in_seconds is the
// difference of two clocks truncated to seconds, so a process started at
// 10.9 s reads an uptime of 1 s at 11.0 s, having run 0.1 s. A node that
// reads 1 s may have started just now: with a lease of half a second, it
// is not counted at the first status read (taken as started a second
// before now, it was: its lease looked long over).
func TestUptimeMayReadASecondLong(t *testing.T) {
	nodes := newFakeNodes(3)
	for i, f := range nodes {
		f.run, f.uptime = fmt.Sprintf("run%d", i), time.Second
	}
	// No status read after New's own: the first one decides.
	r := New(asNodes(nodes), Config{MaxLease: 500 * time.Millisecond, StatusEvery: time.Hour})
	defer r.Close()
	if c := r.Counted(); !slices.Equal(c, []bool{false, false, false}) {
		t.Fatalf("nodes up for 1 s by their word, maybe 1 ms, with leases of 500 ms: counted %v", c)
	}
}

// TestAliasNotCountedTwice: node 1 turns out to reach node 0's server (its
// status carries node 0's run id: a DNS change, a proxy). Both durable, so
// a restart alone would count it at once; as an alias it is not counted,
// and a grant needs node 2 as well. When it reaches a server of its own
// again, it is counted again.
func TestAliasNotCountedTwice(t *testing.T) {
	nodes := oldNodes(3)
	for _, f := range nodes {
		f.durable = true
	}
	r := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond})
	defer r.Close()
	nodes[1].mu.Lock()
	nodes[1].run = nodes[0].run
	nodes[1].mu.Unlock()
	eventually(t, 5*time.Second, "node 1 not counted as node 0's alias", func() bool {
		return slices.Equal(r.Counted(), []bool{true, false, true})
	})
	if h := r.HeldOut(); len(h) != 1 || h[0].Node != 1 || h[0].AliasOf != 0 {
		t.Fatalf("held out: %+v", h)
	}
	nodes[2].mu.Lock()
	nodes[2].down = true
	nodes[2].mu.Unlock()
	_, err := r.Acquire(context.Background(), "k", hold("a"))
	if !errors.Is(err, engine.ErrNoQuorum) || !errors.Is(err, ErrNotCounted) {
		t.Fatalf("acquire with node 0 answering under two names and node 2 down: %v, want NOQUORUM", err)
	}
	nodes[1].mu.Lock()
	nodes[1].run = "run1-own"
	nodes[1].mu.Unlock()
	eventually(t, 5*time.Second, "node 1 counted again on a server of its own", func() bool {
		return slices.Equal(r.Counted(), []bool{true, true, true})
	})
}

// TestVettedProcessCountedAtOnce: an instance that first meets a young
// node counts it at once when the node's record says an instance vetted
// this very process (--new-nodes, or a hold-out already served), and holds
// it out when the record names another process.
func TestVettedProcessCountedAtOnce(t *testing.T) {
	nodes := newFakeNodes(3)
	for i, f := range nodes {
		f.run, f.uptime = fmt.Sprintf("run%d", i), time.Second
		f.vetted = f.run
	}
	nodes[2].vetted = "an-earlier-process"
	r := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: time.Hour})
	defer r.Close()
	if c := r.Counted(); !slices.Equal(c, []bool{true, true, false}) {
		t.Fatalf("counted %v, want the two vetted processes", c)
	}
	if h := r.HeldOut(); len(h) != 1 || h[0].Left < 59*time.Minute {
		t.Fatalf("held out %+v, want node 2 for about an hour", h)
	}
}

// lateAcquires is a fake node whose acquires, once armed, run at once but
// whose replies are held until released: a reply that sits in a queue (a
// loaded host's goroutines, a connection's buffer) while the node's state
// changes.
type lateAcquires struct {
	*fakeNode
	mu      sync.Mutex
	gate    chan struct{} // nil: not armed
	applied chan struct{} // closed once the held acquire ran on the node
}

func (l *lateAcquires) arm() (applied, gate chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gate, l.applied = make(chan struct{}), make(chan struct{})
	return l.applied, l.gate
}

func (l *lateAcquires) Do(ctx context.Context, op *Op, tag int, done Sink) {
	l.mu.Lock()
	gate, applied := l.gate, l.applied
	if op.Kind == OpAcquire {
		l.gate = nil // one acquire only
	}
	l.mu.Unlock()
	if op.Kind == OpFloor && op.Fence > 0 && applied != nil {
		// Armed: the floor waits until the held acquire ran, however
		// late the loaded host lets it reach the node.
		go func() {
			select {
			case <-applied:
				l.fakeNode.Do(ctx, op, tag, done)
			case <-ctx.Done():
				done.Put(Reply{Tag: tag, Err: ctx.Err()})
			}
		}()
		return
	}
	if op.Kind != OpAcquire || gate == nil {
		l.fakeNode.Do(ctx, op, tag, done)
		return
	}
	own := make(Replies, 1)
	l.fakeNode.Do(ctx, op, tag, own)
	go func() {
		rep := <-own
		close(applied)
		<-gate
		done.Put(rep)
	}()
}

// TestStaleReplyOfARaisedNode: nodes 0 and 1 alone record fences up to 6
// and restart empty. An acquire sent while they are held out runs on node
// 0 with the counter it has after the restart (1), before its fence floor
// is raised; its reply is read only once node 0 counts again. Counted,
// with node 2's (2), it made a grant with fence 2, below 6 (seen under
// load in TestFenceFloorWhenTheLastFenceIsLost: 28 after restarts that
// should have given a fence from the time floor). A reply counts only if
// its call was sent after the node was counted again.
func TestStaleReplyOfARaisedNode(t *testing.T) {
	ctx := context.Background()
	fakes := oldNodes(3)
	late := &lateAcquires{fakeNode: fakes[0]}
	nodes := asNodes(fakes)
	nodes[0] = late
	const lease = 2 * time.Second
	r := New(nodes, Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	grant := func(tok string) engine.Grant {
		t.Helper()
		h := hold(tok)
		h.TTL = lease
		var g engine.Grant
		eventually(t, 10*time.Second, "grant to "+tok, func() bool {
			var err error
			g, err = r.Acquire(ctx, "k", h)
			return err == nil
		})
		r.Release(ctx, "k", tok, nil, nil) // its lease may have run out on a loaded host
		waitCount(t, fakes, "k", tok, 0)
		return g
	}
	grant("a")
	fakes[2].setDown(true)
	var top int64
	for i := range 5 {
		top = grant(fmt.Sprintf("c%d", i)).Fence // on nodes 0 and 1 only
	}
	fakes[2].setDown(false)
	for _, f := range fakes[:2] {
		f.setDown(true)
	}
	fakes[0].restartEmpty("run0-b")
	fakes[1].restartEmpty("run1-b")
	// Armed before the hold-out can end: node 0's floor is raised only
	// after the acquire below ran there.
	applied, gate := late.arm()
	for _, f := range fakes[:2] {
		f.setDown(false)
	}
	eventually(t, 10*time.Second, "both seen restarted", func() bool {
		return slices.Equal(r.Counted(), []bool{false, false, true})
	})
	// Sent near the end of the hold-out, so that the grant's validity
	// outlasts the wait for node 0's floor.
	eventually(t, 10*time.Second, "the hold-out nearly over", func() bool {
		h := r.HeldOut()
		return len(h) > 0 && h[0].Node == 0 && h[0].Left < lease/2
	})
	h := hold("b")
	h.TTL = lease
	type result struct {
		g   engine.Grant
		err error
	}
	res := make(chan result, 1)
	go func() {
		g, err := r.Acquire(ctx, "k", h)
		res <- result{g, err}
	}()
	<-applied // on node 0 before its floor is raised
	if c, _ := fakes[0].raised(); c != 0 {
		t.Fatalf("node 0's floor raised to %d before the acquire ran there", c)
	}
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return r.Counted()[0] })
	close(gate)
	got := <-res
	t.Logf("acquire sent while node 0 was held out: %+v %v", got.g, got.err)
	if got.err == nil && got.g.Fence <= top {
		t.Fatalf("grant from a reply made before node 0's floor was raised: fence %d, after %d", got.g.Fence, top)
	}
	if got.err == nil {
		r.Release(ctx, "k", "b", nil, nil)
	}
	waitCount(t, fakes, "k", "b", 0) // released, or rolled back in the background
	if g := grant("d"); g.Fence <= top {
		t.Fatalf("next grant's fence %d, after %d", g.Fence, top)
	}
}

// TestStaleHoldOfARaisedNode: nodes 0 and 1 alone record fences up to 6
// and restart empty. While they are held out, token b's attempt leaves a
// hold on both with fence 1 (their counters after the restart): refused,
// its rollback overtaken by b's retry, which refreshed the hold instead
// (a retry keeps a hold it finds). Once both count again, b's next retry
// found them Mine with fence 1, a majority, and kept that fence: 1 after
// 6 (seen under load in TestFenceFloorWhenTheLastFenceIsLost, fence 1 and
// fence 2 again). A hold recorded before the node's floor was raised does
// not give the grant its fence.
func TestStaleHoldOfARaisedNode(t *testing.T) {
	ctx := context.Background()
	_, r, top := staleHoldStage(t, nil)
	g, err := r.Acquire(ctx, "k", staleHold("b"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= top {
		t.Fatalf("b's retry once nodes 0 and 1 count again: fence %d, after %d", g.Fence, top)
	}
}

// TestOtherNodesRecountKeepsHealthyReplies: the trust epoch is global but
// each node keeps its own (nodeTrust.since): node 2 restarting and being
// counted again while node 0's acquire reply is on its way must not make
// that reply, of a node counted all along, uncounted (a NOQUORUM for every
// call in flight each time any node flaps).
func TestOtherNodesRecountKeepsHealthyReplies(t *testing.T) {
	ctx := context.Background()
	fakes := oldNodes(3)
	late := &lateAcquires{fakeNode: fakes[0]}
	nodes := asNodes(fakes)
	nodes[0] = late
	const lease = time.Second
	r := New(nodes, Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer r.Close()
	fakes[2].restartEmpty("run2-b")
	eventually(t, 10*time.Second, "node 2 seen restarted", func() bool {
		return slices.Equal(r.Counted(), []bool{true, true, false})
	})
	eventually(t, 10*time.Second, "the hold-out nearly over", func() bool {
		h := r.HeldOut()
		return len(h) > 0 && h[0].Node == 2 && h[0].Left < lease/4
	})
	applied, gate := late.arm()
	h := hold("b")
	h.TTL = lease
	type result struct {
		g   engine.Grant
		err error
	}
	res := make(chan result, 1)
	go func() {
		g, err := r.Acquire(ctx, "k", h)
		res <- result{g, err}
	}()
	<-applied
	eventually(t, 10*time.Second, "node 2 counted again", func() bool { return r.Counted()[2] })
	close(gate)
	got := <-res
	if got.err != nil {
		t.Fatalf("acquire whose healthy node 0 answered after node 2 was counted again: %v", got.err)
	}
}

// TestUnreadRestartNotBlamedOnTheEpoch: a node that restarted since the
// last status read answers from a process other than the one counted. Its
// NOQUORUM must say so, not that it was counted again after the call was
// sent (663a91e gave that text for any node still counted).
func TestUnreadRestartNotBlamedOnTheEpoch(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	r := New(asNodes(nodes), Config{MaxLease: time.Minute, StatusEvery: time.Hour})
	defer r.Close()
	nodes[0].restartEmpty("run0-b")
	nodes[1].setDown(true)
	_, err := r.Acquire(ctx, "k", hold("b"))
	if !errors.Is(err, engine.ErrNoQuorum) || !errors.Is(err, ErrNotCounted) {
		t.Fatalf("acquire with node 0 restarted and node 1 down: %v", err)
	}
	if msg := err.Error(); strings.Contains(msg, "counted again only after") {
		t.Fatalf("an unread restart blamed on the trust epoch: %v", err)
	}
}

// TestRetryOfAGrantMadeDuringAHoldOut: node 0 restarts empty and is held
// out; b is granted by nodes 1 and 2 meanwhile (node 0, which still
// receives every write, takes the key too, with the counter it has since
// the restart). Once node 0 counts again, b's retry (LOCK … TOKEN) still
// holds the key on every node, and answers its grant's fence: a hold
// granted before a node's floor was raised is not stale when the grant
// was made by the counted nodes.
func TestRetryOfAGrantMadeDuringAHoldOut(t *testing.T) {
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
	// Granted near the end of the hold-out, so that its lease outlasts it.
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
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return r.Counted()[0] })
	again, err := r.Acquire(ctx, "k", b)
	if err != nil {
		t.Fatalf("b's retry while it holds the key: %v", err)
	}
	if again.Fence != g.Fence {
		t.Fatalf("b's retry while it holds the key: fence %d, its grant's %d", again.Fence, g.Fence)
	}
}

// TestStaleHoldRetriedThroughAnotherInstance is TestStaleHoldOfARaisedNode
// with the retry sent through a second instance started after the floors
// were raised.
func TestStaleHoldRetriedThroughAnotherInstance(t *testing.T) {
	ctx := context.Background()
	nodes, _, top := staleHoldStage(t, nil)
	// b's client retries through a second instance, started now: it
	// first sees nodes 0 and 1 vetted, and remembers no floor for them.
	r2 := New(asNodes(nodes), staleHoldConfig)
	defer r2.Close()
	g, err := r2.Acquire(ctx, "k", staleHold("b"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= top {
		t.Fatalf("b's retry through another instance once nodes 0 and 1 count again: fence %d, after %d", g.Fence, top)
	}
}

// TestStaleHoldRetriedThroughAnInstanceThatSawTheRestart: as
// TestStaleHoldRetriedThroughAnotherInstance, through an instance that
// counted nodes 0 and 1 before their restart and reads their status only
// when b's retry meets their new processes: it finds them vetted, and
// takes b's holds there, below the counters they recorded with their
// floors, for holds from before the floor: a fence above every fence
// granted before. (Seen failing with observe taking no floor for a node
// seen restarting: fence 1 after 6.)
func TestStaleHoldRetriedThroughAnInstanceThatSawTheRestart(t *testing.T) {
	ctx := context.Background()
	var r2 *Redlock
	nodes, _, top := staleHoldStage(t, func(nodes []*fakeNode) {
		r2 = New(asNodes(nodes), Config{MaxLease: staleHoldConfig.MaxLease, StatusEvery: time.Hour, NodeTimeout: 10 * time.Second})
		t.Cleanup(func() { r2.Close() })
	})
	if f0, f1 := nodes[0].status().Floor, nodes[1].status().Floor; f0 == 0 || f1 == 0 {
		t.Fatalf("floors recorded: %d, %d", f0, f1)
	}
	var g engine.Grant
	eventually(t, 10*time.Second, "b's retry through the instance that saw the restart", func() bool {
		var err error
		g, err = r2.Acquire(ctx, "k", staleHold("b"))
		return err == nil
	})
	if g.Fence <= top {
		t.Fatalf("b's retry through an instance that saw nodes 0 and 1 restart: fence %d, after %d", g.Fence, top)
	}
}

// TestRetryOfAGrantMadeAfterTheFloorThroughAnInstanceThatSawTheRestart:
// node 0 restarts empty; instance A holds it out, raises its floor and
// counts it again; b is granted through A by nodes 0 and 1 (node 2 down),
// after the floor. Instance B, which counted node 0 before the restart and
// has not read its status since, learns of the restart from b's retry and
// finds node 0 vetted. Its holds up to the counter recorded with the
// floor may predate it; b's, above it, does not: b's retry through B,
// with node 2 still down, answers its grant's fence. Taking every hold
// up to the node's counter when B saw it vetted (as before the node
// recorded its floor) set b's hold aside, and the retry committed a new
// fence: 5 after its grant's 4.
func TestRetryOfAGrantMadeAfterTheFloorThroughAnInstanceThatSawTheRestart(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 2 * time.Second
	a := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer a.Close()
	b := New(asNodes(nodes), Config{MaxLease: lease, StatusEvery: time.Hour, NodeTimeout: 10 * time.Second})
	defer b.Close()
	grantedAndReleased(t, a, nodes, lease)
	nodes[0].restartEmpty("run0-b")
	eventually(t, 10*time.Second, "node 0 seen restarted", func() bool { return !a.Counted()[0] })
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return a.Counted()[0] })
	floor, _ := nodes[0].raised()
	nodes[2].setDown(true)
	hb := hold("b")
	hb.TTL = lease
	g, err := a.Acquire(ctx, "k", hb)
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= floor {
		t.Fatalf("b granted after node 0's floor %d with fence %d", floor, g.Fence)
	}
	waitCount(t, nodes, "k", "b", 2)
	// b's first retry through B meets node 0's new process: not counted,
	// and it asks for a status read.
	var again engine.Grant
	eventually(t, 10*time.Second, "b's retry through B", func() bool {
		again, err = b.Acquire(ctx, "k", hb)
		return err == nil
	})
	if again.Fence != g.Fence {
		t.Fatalf("b's retry through B while it holds the key on nodes 0 and 1: fence %d, its grant's %d", again.Fence, g.Fence)
	}
}

// staleHoldConfig is the Redlock of the stale-hold tests: a short lease,
// so that the restarted nodes count again soon.
var staleHoldConfig = Config{MaxLease: 500 * time.Millisecond, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second}

// staleHold is token's hold for the lease of staleHoldConfig.
func staleHold(token string) engine.Hold {
	h := hold(token)
	h.TTL = staleHoldConfig.MaxLease
	return h
}

// staleHoldStage is the stage of the stale-hold tests: fences up to top
// granted on nodes 0 and 1 only, both restarted empty, and, while they
// were held out, b's hold left on both with their counters after the
// restart (a refused attempt whose rollback b's retry overtook); it
// returns once r counts both again.
func staleHoldStage(t *testing.T, made func([]*fakeNode)) (nodes []*fakeNode, r *Redlock, top int64) {
	t.Helper()
	ctx := context.Background()
	nodes = oldNodes(3)
	if made != nil {
		made(nodes)
	}
	r = New(asNodes(nodes), staleHoldConfig)
	t.Cleanup(func() { r.Close() })
	h := staleHold
	grant := func(tok string) int64 {
		t.Helper()
		var g engine.Grant
		eventually(t, 10*time.Second, "grant to "+tok, func() bool {
			var err error
			g, err = r.Acquire(ctx, "k", h(tok))
			return err == nil
		})
		r.Release(ctx, "k", tok, nil, nil) // its lease may have run out on a loaded host
		waitCount(t, nodes, "k", tok, 0)
		return g.Fence
	}
	grant("a")
	nodes[2].setDown(true)
	for i := range 5 {
		top = grant(fmt.Sprintf("c%d", i)) // on nodes 0 and 1 only
	}
	nodes[2].setDown(false)
	for _, f := range nodes[:2] {
		f.setDown(true)
	}
	nodes[0].restartEmpty("run0-b")
	nodes[1].restartEmpty("run1-b")
	for _, f := range nodes[:2] {
		f.setDown(false)
	}
	eventually(t, 10*time.Second, "both seen restarted", func() bool {
		return slices.Equal(r.Counted(), []bool{false, false, true})
	})
	// What the refused attempt and the retry that overtook its rollback
	// leave: b holds the key on nodes 0 and 1 with their counters then. A
	// real one lives up to a lease past its attempt, which may come just
	// before the floor; here longer, so that it is still there when the
	// nodes count again on a loaded host.
	left := h("b")
	left.TTL = 10 * time.Second
	for _, f := range nodes[:2] {
		// (An acquire of the grants above that lands late may hold the
		// key there for a lease first.)
		eventually(t, 10*time.Second, "b's hold left on "+f.String(), func() bool {
			c, err := f.Acquire(ctx, "k", left, "refused")
			if err != nil || c.State == Acquired && c.Fence > top {
				t.Fatalf("the hold left on %s: %+v %v", f, c, err)
			}
			return c.State == Acquired
		})
	}
	eventually(t, 10*time.Second, "both counted again", func() bool {
		return slices.Equal(r.Counted(), []bool{true, true, true})
	})
	return nodes, r, top
}

// TestRetryOfAGrantMadeDuringAHoldOutOneNodeDown: as
// TestRetryOfAGrantMadeDuringAHoldOut, but node 2 is down at b's retry.
// b still holds the key on nodes 0 and 1, a majority, both from its
// grant; node 0's hold is set aside (staleHold), node 1's alone is no
// majority, so the retry commits a fence above every counter seen: a new
// fence for a lock b held all along (safe, never going back, but not its
// grant's).
func TestRetryOfAGrantMadeDuringAHoldOutOneNodeDown(t *testing.T) {
	t.Skip("known (144fe2e): a set-aside hold of the token's own grant does not count toward a majority, " +
		"so with one other node down the holder's retry commits a new fence: 5 after its grant's 4")
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
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return r.Counted()[0] })
	nodes[2].setDown(true)
	retryAnswers(t, r, b, g.Fence, "b's retry while it holds the key on nodes 0 and 1")
}

// TestRetryOfAGrantMadeBetweenTwoRaisesOfTheSameProcess: node 0 restarts
// empty; instance A holds it out, raises its floor and counts it again; b
// is granted through A by nodes 0 and 1 (node 2 down), after the floor.
// Then a second instance that read node 0's status before A's raise (not
// vetted yet) raises it too, for the same process: the OpFloor it sends,
// late. Instance C, started after, first sees node 0 vetted. b's hold there
// was granted after the process's first floor, with every node's fence
// from before the restart below it: b's retry through C, with node 2 still
// down, answers its grant's fence. When the second raise overwrote the
// record with the node's counter then (above b's fence), C set b's hold
// aside and the retry committed a new fence: 5 after its grant's 4 (an
// instance started later, which before the record took none of a vetted
// node's holds as stale, answered 4).
func TestRetryOfAGrantMadeBetweenTwoRaisesOfTheSameProcess(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 2 * time.Second
	cfg := Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second}
	a := New(asNodes(nodes), cfg)
	defer a.Close()
	grantedAndReleased(t, a, nodes, lease)
	nodes[0].restartEmpty("run0-b")
	eventually(t, 10*time.Second, "node 0 seen restarted", func() bool { return !a.Counted()[0] })
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return a.Counted()[0] })
	floor, _ := nodes[0].raised()
	nodes[2].setDown(true)
	hb := hold("b")
	hb.TTL = lease
	g, err := a.Acquire(ctx, "k", hb)
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= floor {
		t.Fatalf("b granted after node 0's floor %d with fence %d", floor, g.Fence)
	}
	waitCount(t, nodes, "k", "b", 2)
	// The late raise of the second instance, with the floor it computed
	// from its read before A's: the op it sends, as it sends it.
	done := make(Replies, 1)
	nodes[0].Do(ctx, &Op{Kind: OpFloor, Fence: floor, Token: "run0-b"}, 0, done)
	if rep := <-done; rep.Err != nil || !rep.OK {
		t.Fatalf("second raise: %+v", rep)
	}
	c := New(asNodes(nodes), cfg)
	defer c.Close()
	retryAnswers(t, c, hb, g.Fence, "b's retry through C while it holds the key on nodes 0 and 1")
}

// TestRetryOfAGrantMadeAfterAnOldBuildsRaise: as
// TestRetryOfAGrantMadeBetweenTwoRaisesOfTheSameProcess, with node 0's
// first raise by a build before the vetted floor (up to 65a4181: it
// records none), then b's grant, then the late raise of an instance of
// this build. The node knows no floor for the process: nothing is
// recorded, and C, which first sees node 0 vetted, takes none of its
// holds as stale, as before the record: b's retry through it answers its
// grant's fence. When the late raise recorded the node's counter then,
// above b's fence, C set b's hold aside: fence 5 after its grant's 4.
func TestRetryOfAGrantMadeAfterAnOldBuildsRaise(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 2 * time.Second
	cfg := Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second}
	a := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second})
	defer a.Close()
	grantedAndReleased(t, a, nodes, lease)
	top := nodes[1].status().FenceMax
	nodes[0].restartEmpty("run0-b")
	eventually(t, 10*time.Second, "node 0 seen restarted", func() bool { return !a.Counted()[0] })
	// The old build's instance, whose hold-out is over, raises it.
	nodes[0].oldBuildVet(top, "run0-b")
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return a.Counted()[0] })
	nodes[2].setDown(true)
	hb := hold("b")
	hb.TTL = lease
	g, err := a.Acquire(ctx, "k", hb)
	if err != nil {
		t.Fatal(err)
	}
	waitCount(t, nodes, "k", "b", 2)
	done := make(Replies, 1)
	nodes[0].Do(ctx, &Op{Kind: OpFloor, Fence: top, Token: "run0-b"}, 0, done)
	if rep := <-done; rep.Err != nil || !rep.OK {
		t.Fatalf("late raise: %+v", rep)
	}
	c := New(asNodes(nodes), cfg)
	defer c.Close()
	retryAnswers(t, c, hb, g.Fence, "b's retry through C while it holds the key on nodes 0 and 1")
}

// TestRetryOfAGrantMadeDuringAHoldOutThroughALaterInstance: as
// TestRetryOfAGrantMadeDuringAHoldOutOneNodeDown, with b's retry sent
// through an instance started after node 0 counted again. Before the node
// recorded its floor, such an instance first saw node 0 vetted and took
// none of its holds as stale: b's retry answered its grant's fence (4).
// Now every instance sets node 0's hold aside (its fence is below the
// recorded floor), as the instance that raised it did: the known case of
// the test above, for every instance.
func TestRetryOfAGrantMadeDuringAHoldOutThroughALaterInstance(t *testing.T) {
	t.Skip("known (floorrec): the recorded floor makes every instance set aside a hold of the token's own grant made " +
		"by the counted nodes during the hold-out, as the raising instance does (TestRetryOfAGrantMadeDuringAHoldOutOneNodeDown): " +
		"b's retry through an instance started after, node 2 down, commits a new fence, 5 after its grant's 4 (main answered 4); " +
		"telling such a hold from a stale one needs the node to record which holds were granted (not small)")
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 3 * time.Second
	cfg := Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond, NodeTimeout: 10 * time.Second}
	r := New(asNodes(nodes), cfg)
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
	eventually(t, 10*time.Second, "node 0 counted again", func() bool { return r.Counted()[0] })
	nodes[2].setDown(true)
	c := New(asNodes(nodes), cfg)
	defer c.Close()
	retryAnswers(t, c, b, g.Fence, "b's retry through C while it holds the key on nodes 0 and 1")
}

// TestRetryThroughTheSecondRaiser: node 0 restarts empty with node 2 down
// (its floor is the time: too few other nodes are intact). Instances A
// and B both read it once their hold-outs are over, A first, and both
// raise it, A's raise landing first; A counts it and grants b by nodes 0
// and 1, fence A's floor + 1; then B's raise lands, to B's later time
// floor, and B counts node 0 with the record of A's raise. b's retry
// through B answers its grant's fence: b's hold on node 0 was granted
// after the process's floor was first raised. When B took the floor it
// asked for (above b's fence) as the bound of the holds from before the
// floor, it set b's hold aside, and the retry committed a new fence.
func TestRetryThroughTheSecondRaiser(t *testing.T) {
	ctx := context.Background()
	nodes := oldNodes(3)
	const lease = 2 * time.Second
	cfg := Config{MaxLease: lease, StatusEvery: time.Hour, NodeTimeout: 10 * time.Second}
	la, lb := newLink(nodes[0]), newLink(nodes[0])
	a := New([]Node{la, nodes[1], nodes[2]}, cfg)
	defer a.Close()
	b := New([]Node{lb, nodes[1], nodes[2]}, cfg)
	defer b.Close()
	defer la.let()
	defer lb.let()
	grantedAndReleased(t, a, nodes, lease)
	nodes[2].setDown(true)
	nodes[0].restartEmpty("run0-b")
	a.checkNodes()
	b.checkNodes()
	if a.Counted()[0] || b.Counted()[0] {
		t.Fatal("node 0 counted right after its restart")
	}
	over := func(r *Redlock) func() bool {
		return func() bool {
			for _, h := range r.HeldOut() {
				if h.Node == 0 {
					return h.Left <= 0
				}
			}
			return false
		}
	}
	eventually(t, 10*time.Second, "A's hold-out over", over(a))
	eventually(t, 10*time.Second, "B's hold-out over", over(b))
	raise := func(r *Redlock, l *link) chan struct{} {
		l.hold(OpFloor)
		done := make(chan struct{})
		go func() { r.checkNodes(); close(done) }()
		eventually(t, 10*time.Second, "the raise held", func() bool { return l.heldCalls() == 1 })
		return done
	}
	aDone := raise(a, la)
	time.Sleep(5 * time.Millisecond) // B's time floor above A's + 1
	bDone := raise(b, lb)
	la.let()
	<-aDone
	if !a.Counted()[0] {
		t.Fatal("A does not count node 0 after its raise")
	}
	hb := hold("b")
	hb.TTL = lease
	g, err := a.Acquire(ctx, "k", hb)
	if err != nil {
		t.Fatal(err)
	}
	waitCount(t, nodes, "k", "b", 2)
	lb.let()
	<-bDone
	if !b.Counted()[0] {
		t.Fatal("B does not count node 0 after its raise")
	}
	if f, _ := nodes[0].raised(); f <= g.Fence {
		t.Fatalf("B's floor %d, not above b's fence %d: the stage does not test", f, g.Fence)
	}
	again, err := b.Acquire(ctx, "k", hb)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fence != g.Fence {
		t.Fatalf("b's retry through B while it holds the key on nodes 0 and 1: fence %d, its grant's %d", again.Fence, g.Fence)
	}
}

// grantedAndReleased grants and releases token a's lease on "k" three times
// through r, so that every node's counter is above the restart's.
func grantedAndReleased(t *testing.T, r *Redlock, nodes []*fakeNode, lease time.Duration) {
	t.Helper()
	h := hold("a")
	h.TTL = lease
	for range 3 {
		if _, err := r.Acquire(context.Background(), "k", h); err != nil {
			t.Fatal(err)
		}
		r.Release(context.Background(), "k", "a", nil, nil)
		waitCount(t, nodes, "k", "a", 0)
	}
}

// retryAnswers retries h's grant on "k" through r and checks that it
// answers the grant's fence (and says so apart where it goes back).
func retryAnswers(t *testing.T, r *Redlock, h engine.Hold, fence int64, what string) {
	t.Helper()
	again, err := r.Acquire(context.Background(), "k", h)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if again.Fence < fence {
		t.Fatalf("%s: fence %d going back below its grant's %d", what, again.Fence, fence)
	}
	if again.Fence != fence {
		t.Fatalf("%s: fence %d, its grant's %d", what, again.Fence, fence)
	}
}
