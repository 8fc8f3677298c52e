package quorum

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

func hold(token string) engine.Hold {
	return engine.Hold{Token: token, TTL: 10 * time.Second, Mode: engine.Lease}
}

// holders counts the fake nodes on which token holds key.
func holders(nodes []*fakeNode, key, token string) int {
	n := 0
	for _, f := range nodes {
		if f.holds(key, token) {
			n++
		}
	}
	return n
}

// waitHeld polls until token holds key on every node.
func waitHeld(t *testing.T, nodes []*fakeNode, key, token string) {
	t.Helper()
	waitCount(t, nodes, key, token, len(nodes))
}

// waitCount polls until token holds key on exactly want nodes: the calls
// beyond the quorum land in the background.
func waitCount(t *testing.T, nodes []*fakeNode, key, token string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for holders(nodes, key, token) != want {
		if time.Now().After(deadline) {
			t.Fatalf("held on %d of %d nodes, want %d", holders(nodes, key, token), len(nodes), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// withMask marks node i down where bit i of mask is set.
func withMask(nodes []*fakeNode, mask uint) {
	for i, f := range nodes {
		f.setDown(mask&(1<<i) != 0)
	}
}

// TestAcquireEveryFailureSubset walks every subset of failing nodes for 3
// and 5 nodes: a grant exactly when a majority is up, NOQUORUM otherwise,
// and never a key left behind by a failed attempt.
func TestAcquireEveryFailureSubset(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 3, 5} {
		for mask := uint(0); mask < 1<<n; mask++ {
			t.Run(fmt.Sprintf("n%d/mask%05b", n, mask), func(t *testing.T) {
				nodes := newFakeNodes(n)
				r := New(asNodes(nodes), Config{})
				withMask(nodes, mask)
				up := n - bits.OnesCount(mask)
				g, err := r.Acquire(ctx, "k", hold("tok"))
				if up >= n/2+1 {
					if err != nil {
						t.Fatalf("%d of %d up: %v", up, n, err)
					}
					if g.Fence != 1 || g.Validity <= 0 || g.Token != "tok" {
						t.Fatalf("grant %+v", g)
					}
					waitCount(t, nodes, "k", "tok", up)
					return
				}
				var nq *engine.NoQuorumError
				if !errors.As(err, &nq) || !errors.Is(err, engine.ErrNoQuorum) {
					t.Fatalf("%d of %d up: err %v, want engine.NoQuorumError", up, n, err)
				}
				if nq.Answered > up || nq.Needed != n/2+1 || !errors.Is(err, errDown) {
					t.Fatalf("error %+v", nq)
				}
				waitCount(t, nodes, "k", "tok", 0) // rolled back in the background
			})
		}
	}
}

// TestOperationsEveryFailureSubset checks extend, release and inspect over
// every subset of failing nodes of a lock held on all five.
func TestOperationsEveryFailureSubset(t *testing.T) {
	ctx := context.Background()
	const n = 5
	for mask := uint(0); mask < 1<<n; mask++ {
		nodes := newFakeNodes(n)
		r := New(asNodes(nodes), Config{})
		if _, err := r.Acquire(ctx, "k", hold("tok")); err != nil {
			t.Fatal(err)
		}
		waitHeld(t, nodes, "k", "tok") // the calls beyond the quorum land in the background
		withMask(nodes, mask)
		majority := n-bits.OnesCount(mask) >= r.Quorum()

		v, err := r.Extend(ctx, "k", "tok", time.Minute, engine.Lease)
		checkQuorum(t, "extend", mask, majority, err)
		if majority && (v <= 30*time.Second || v > time.Minute) {
			t.Fatalf("mask %05b: validity %v", mask, v)
		}
		h, ok, err := r.Inspect(ctx, "k")
		checkQuorum(t, "inspect", mask, majority, err)
		if majority && (!ok || h.Fence != 1 || h.Validity <= 0) {
			t.Fatalf("mask %05b: inspect %+v %v", mask, h, ok)
		}
		if _, err := r.Extend(ctx, "k", "other", time.Minute, ""); majority && !errors.Is(err, engine.ErrNotHeld) {
			t.Fatalf("mask %05b: extend by another token: %v", mask, err)
		}
		released, err := r.Release(ctx, "k", "tok", nil, nil)
		checkQuorum(t, "release", mask, majority, err)
		if released != majority {
			t.Fatalf("mask %05b: released %v", mask, released)
		}
	}
}

func checkQuorum(t *testing.T, op string, mask uint, majority bool, err error) {
	t.Helper()
	if majority && err != nil {
		t.Fatalf("%s mask %05b: %v", op, mask, err)
	}
	if !majority && !errors.Is(err, engine.ErrNoQuorum) {
		t.Fatalf("%s mask %05b: err %v, want engine.ErrNoQuorum", op, mask, err)
	}
}

func TestAcquireHeldByAnother(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	if _, err := r.Acquire(ctx, "k", hold("a")); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, nodes, "k", "a")
	if _, err := r.Acquire(ctx, "k", hold("b")); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("second holder: %v", err)
	}
	if holders(nodes, "k", "b") != 0 || holders(nodes, "k", "a") != 3 {
		t.Fatal("failed attempt changed the nodes")
	}
	// Held by another on a minority only: a majority is still free. (The
	// release is carried to node 0 once it is up unless its Redlock closes.)
	nodes[0].setDown(true)
	other := New(asNodes(nodes), Config{})
	if _, err := other.Release(ctx, "k", "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	other.Close()
	nodes[0].setDown(false)
	g, err := r.Acquire(ctx, "k", hold("b"))
	if err != nil || g.Fence < 2 { // above a's; b's refused attempt may have raised a counter, landing late
		t.Fatalf("grant %+v, %v", g, err)
	}
}

// TestFenceIncreasesUnderMinorityLoss takes 300 grants of one key, each
// with a different random minority of nodes down, and checks that every
// fence is larger than the one before.
func TestFenceIncreasesUnderMinorityLoss(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{3, 5} {
		nodes := newFakeNodes(n)
		r := New(asNodes(nodes), Config{})
		var last int64
		for i := range 300 {
			withMask(nodes, 0)
			for j := range n / 2 {
				nodes[(i*7+j*3)%n].setDown(true)
			}
			tok := fmt.Sprint("t", i)
			g, err := r.Acquire(ctx, "k", hold(tok))
			if err != nil {
				t.Fatalf("grant %d: %v", i, err)
			}
			if g.Fence <= last {
				t.Fatalf("n=%d grant %d: fence %d after %d", n, i, g.Fence, last)
			}
			last = g.Fence
			if ok, err := r.Release(ctx, "k", tok, nil, nil); !ok || err != nil {
				t.Fatalf("release %d: %v %v", i, ok, err)
			}
			waitCount(t, nodes, "k", tok, 0) // no up node keeps it once the background calls land
		}
	}
}

func TestAcquireRetryKeepsFence(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	first, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil || again.Fence != first.Fence {
		t.Fatalf("retry: %+v %v, first %+v", again, err, first)
	}
}

// TestRetryAfterLapseGetsNewFence: token a holds on a minority node only
// because b took the lock in between; a's retry must not reuse its old
// fence, which is below b's.
func TestRetryAfterLapseGetsNewFence(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	a, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	waitHeld(t, nodes, "k", "a")
	// a's key vanishes from nodes 1 and 2 (expiry there), b is granted there.
	for _, f := range nodes[1:] {
		f.mu.Lock()
		delete(f.entries, "k")
		f.mu.Unlock()
	}
	nodes[0].setDown(true)
	b, err := r.Acquire(ctx, "k", hold("b"))
	nodes[0].setDown(false)
	if err != nil || b.Fence <= a.Fence {
		t.Fatalf("b: %+v %v", b, err)
	}
	if _, err := r.Release(ctx, "k", "b", nil, nil); err != nil {
		t.Fatal(err)
	}
	again, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil || again.Fence <= b.Fence {
		t.Fatalf("a's retry after b: %+v %v, b had %d", again, err, b.Fence)
	}
}

// TestAcquireDoesNotWaitForSlowNode: with two fast nodes of three, the grant
// comes without waiting for the third, whose call is still blocked.
func TestAcquireDoesNotWaitForSlowNode(t *testing.T) {
	nodes := newFakeNodes(3)
	hang := make(chan struct{})
	nodes[2].hang = hang
	defer close(hang)
	r := New(asNodes(nodes), Config{NodeTimeout: time.Hour})
	done := make(chan error, 1)
	go func() {
		_, err := r.Acquire(context.Background(), "k", hold("a"))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire waited for the hung node")
	}
}

// TestAcquireWithNoValidityLeft: a TTL shorter than the round trips leaves
// no validity; the attempt is refused and rolled back.
func TestAcquireWithNoValidityLeft(t *testing.T) {
	nodes := newFakeNodes(3)
	for _, f := range nodes {
		f.delay = 5 * time.Millisecond
	}
	r := New(asNodes(nodes), Config{})
	h := engine.Hold{Token: "a", TTL: 6 * time.Millisecond, Mode: engine.Lease}
	if _, err := r.Acquire(context.Background(), "k", h); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("err %v", err)
	}
	waitCount(t, nodes, "k", "a", 0)
}

// TestAcquireCancelled: a caller that goes away gets its context's error
// and the attempt is rolled back.
func TestAcquireCancelled(t *testing.T) {
	nodes := newFakeNodes(3)
	hang := make(chan struct{})
	for _, f := range nodes[1:] {
		f.hang = hang
	}
	r := New(asNodes(nodes), Config{NodeTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := r.Acquire(ctx, "k", hold("a")); done <- err }()
	for !nodes[0].holds("k", "a") {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	close(hang) // the rollback is carried to the hung nodes once they answer
	waitCount(t, nodes, "k", "a", 0)
}

func commits(nodes []*fakeNode) int {
	n := 0
	for _, f := range nodes {
		f.mu.Lock()
		n += f.commits
		f.mu.Unlock()
	}
	return n
}

// TestCommitOnlyWhenCountersDisagree: while the nodes' counters agree, a
// grant takes one round (the acquire records the fence); after a node
// missed a grant, a grant that counts on it commits the larger fence.
//
// Each grant waits for its acquire to land on every node that is up before
// it releases: an acquire still in flight when the release lands is undone
// and leaves that node's counter behind, and the next grant would then
// rightly commit (it did, about one run in thirty).
func TestCommitOnlyWhenCountersDisagree(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	grant := func(tok string, up int) int64 {
		t.Helper()
		g, err := r.Acquire(ctx, "k", hold(tok))
		if err != nil {
			t.Fatal(err)
		}
		waitCount(t, nodes, "k", tok, up) // every node that is up counted this grant
		if ok, err := r.Release(ctx, "k", tok, nil, nil); !ok || err != nil {
			t.Fatal(ok, err)
		}
		waitCount(t, nodes, "k", tok, 0) // the release's last call lands before the next fault
		return g.Fence
	}
	if f := grant("a", 3); f != 1 || commits(nodes) != 0 {
		t.Fatalf("fence %d, %d commits for counters in step", f, commits(nodes))
	}
	nodes[2].setDown(true) // node 2 misses grant b: its counter lags
	if f := grant("b", 2); f != 2 || commits(nodes) != 0 {
		t.Fatalf("fence %d, %d commits", f, commits(nodes))
	}
	nodes[2].setDown(false)
	nodes[0].setDown(true) // nodes 1 and 2 now report 3 and 2
	if f := grant("c", 2); f != 3 || commits(nodes) == 0 {
		t.Fatalf("fence %d after drift, %d commits (want a commit)", f, commits(nodes))
	}
}

// TestReleaseUndoesStragglingAcquire: an UNLOCK right after a grant whose
// acquire on the slowest node is still in flight does not wait for it; it
// marks the attempt undone there, so the straggler takes nothing when it
// lands, and the key is free on every node.
func TestReleaseUndoesStragglingAcquire(t *testing.T) {
	ctx := context.Background()
	for i := range 20 {
		nodes := newFakeNodes(3)
		nodes[2].pause()
		r := New(asNodes(nodes), Config{NodeTimeout: time.Minute})
		tok := fmt.Sprint("t", i)
		h := hold(tok)
		h.TTL = time.Hour // no expiry to hide a straggler
		if _, err := r.Acquire(ctx, "k", h); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.Release(ctx, "k", tok, nil, nil); !ok || err != nil {
			t.Fatalf("round %d: release %v %v", i, ok, err)
		}
		nodes[2].resume(i%2 == 0) // the release lands first, then the straggler; or the other way
		waitCount(t, nodes, "k", tok, 0)
		if err := r.Close(); err != nil { // every background call has landed
			t.Fatal(err)
		}
		if n := holders(nodes, "k", tok); n != 0 {
			t.Fatalf("round %d: the straggling acquire outlived the release on %d nodes", i, n)
		}
	}
}

func TestFreeAfter(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		held heldTimes
		n    int
		want time.Duration
	}{
		{heldTimes{5 * s, 8 * s}, 3, 5 * s},        // one node free: one more must free up
		{heldTimes{8 * s, 1 * s, 5 * s}, 3, 5 * s}, // all held: the second to expire frees a majority
		{heldTimes{2 * s}, 3, 0},                   // a majority is free already
		{heldTimes{4 * s, 3 * s, 9 * s, 1 * s}, 5, 3 * s},
	} {
		if got := tc.held.freeAfter(tc.n/2+1, tc.n); got != tc.want {
			t.Errorf("%v of %d: %v, want %v", tc.held, tc.n, got, tc.want)
		}
	}
}

// TestRefusalSaysWhenTheKeyFreesUp: an acquire refused by a holder reports
// how long that holder's lease still runs.
func TestRefusalSaysWhenTheKeyFreesUp(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	if _, err := r.Acquire(ctx, "k", engine.Hold{Token: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, nodes, "k", "a")
	_, err := r.Acquire(ctx, "k", hold("b"))
	var busy *engine.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, engine.ErrNotAcquired) || busy.RetryAfter <= 50*time.Second || busy.RetryAfter > time.Minute {
		t.Fatalf("refusal %v", err)
	}
}

// TestFreshAcquireRefusesSameToken: a fresh acquire (SET NX) is refused
// when its token already holds the key — two legacy clients may lock with
// the same value — and its rollback leaves the existing holder's nodes
// alone, also where it did take the one node the holder lacked.
func TestFreshAcquireRefusesSameToken(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	nodes[2].setDown(true)
	if _, err := r.Acquire(ctx, "k", hold("1")); err != nil { // held on nodes 0 and 1
		t.Fatal(err)
	}
	nodes[2].setDown(false)
	fresh := hold("1")
	fresh.Fresh = true
	if _, err := r.Acquire(ctx, "k", fresh); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("fresh acquire with the holder's value: %v, want ErrNotAcquired", err)
	}
	waitCount(t, nodes, "k", "1", 2) // node 2 rolled back; 0 and 1 keep the first grant
	if !nodes[0].holds("k", "1") || !nodes[1].holds("k", "1") {
		t.Fatal("the rollback removed the earlier holder's nodes")
	}
	if _, err := r.Acquire(ctx, "k", hold("1")); err != nil { // a retry by the holder still works
		t.Fatalf("retry: %v", err)
	}
}

// TestBoundRenewalOfALeaseIsNotBound: once EXPIRE made a connection-bound
// lock a lease, the watchdog's renewal fails with ErrNotBound, not
// ErrNotHeld (which would count the lock lost), and changes nothing.
func TestBoundRenewalOfALeaseIsNotBound(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	h := hold("tok")
	h.Mode = engine.Bound
	if _, err := r.Acquire(ctx, "k", h); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Extend(ctx, "k", "tok", time.Minute, engine.Bound); err != nil {
		t.Fatalf("renewal while bound: %v", err)
	}
	if _, err := r.Extend(ctx, "k", "tok", 30*time.Second, engine.Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Extend(ctx, "k", "tok", time.Minute, engine.Bound); !errors.Is(err, engine.ErrNotBound) {
		t.Fatalf("renewal of a lease: %v, want ErrNotBound", err)
	}
	if e, _, _ := nodes[0].Inspect(ctx, "k"); e.TTL > 30*time.Second {
		t.Fatalf("the refused renewal changed the lease: %v", e.TTL)
	}
}

// TestInspectSeesAnExtendAMajorityApplied: an extend acknowledged by a
// majority, with the one node it missed among the first to answer an
// inspection. The inspection must report the new lease (read your own
// writes: PTTL right after PEXPIRE), not the stale node's.
func TestInspectSeesAnExtendAMajorityApplied(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{})
	if _, err := r.Acquire(ctx, "k", hold("tok")); err != nil { // a 10 s lease
		t.Fatal(err)
	}
	waitCount(t, nodes, "k", "tok", 3)
	nodes[2].setDown(true)
	if _, err := r.Extend(ctx, "k", "tok", time.Minute, engine.Lease); err != nil {
		t.Fatal(err)
	}
	nodes[2].setDown(false)
	nodes[1].mu.Lock()
	nodes[1].delay = 20 * time.Millisecond // nodes 0 and 2 answer first
	nodes[1].mu.Unlock()
	h, ok, err := r.Inspect(ctx, "k")
	if err != nil || !ok || h.Validity < 50*time.Second {
		t.Fatalf("inspect after a majority extended to 1 min: %+v %v %v", h, ok, err)
	}
}

// TestLateTakerKeepsItsFence: nodes 1 and 2 take k with the same counter
// and decide the grant (no commit round); node 0, whose counter ran ahead
// (grants of other keys, or an earlier attempt that took and gave back the
// key there), answers late, having taken k with a higher fence. Node 0
// keeps it: a fence recorded is never lowered (commit says why). LOCKINFO
// and a retry answer the fence the client was told, the one a majority
// records.
func TestLateTakerKeepsItsFence(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	nodes[0].counter["k"] = 5
	nodes[0].hang = make(chan struct{})
	r := New(asNodes(nodes), Config{})
	defer r.Close()
	g, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil || g.Fence != 1 {
		t.Fatalf("grant: %+v %v, want fence 1 from nodes 1 and 2", g, err)
	}
	close(nodes[0].hang)
	waitFor(t, "node 0's late take", func() bool { tok, f, _ := entryOf(nodes[0], "k"); return tok == "a" && f == 6 })
	waitFor(t, "the grant's settle", func() bool { return r.pending("k", "a") == (pendingAcquire{}) })
	if _, f, _ := entryOf(nodes[0], "k"); f != 6 {
		t.Fatalf("node 0 records fence %d, want the 6 it took the key with (never lowered)", f)
	}
	nodes[2].mu.Lock()
	nodes[2].delay = 50 * time.Millisecond // the first majority to answer disagrees
	nodes[2].mu.Unlock()
	h, ok, err := r.Inspect(ctx, "k")
	if err != nil || !ok || h.Fence != g.Fence {
		t.Fatalf("inspect: %+v %v %v, want the grant's fence %d", h, ok, err, g.Fence)
	}
	again, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil || again.Fence != g.Fence {
		t.Fatalf("retry: %+v %v, want the grant's fence %d", again, err, g.Fence)
	}
}
