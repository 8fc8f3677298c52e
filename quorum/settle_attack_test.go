package quorum

import (
	"context"
	"testing"
	"time"
)

// waitFor polls cond (under no lock of its own) until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func entryOf(f *fakeNode, key string) (token string, fence int64, attempt string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.live(key); e != nil {
		return e.Token, e.Fence, e.attempt
	}
	return "", -1, ""
}

// lateSetup: nodes 0-2 agree on fence 11; node 3 (counter 0) answers late
// with fence 1; node 4 hangs, so the grant's settle has not yet sent its
// commit to node 3 when the test acts.
func lateSetup(t *testing.T, cfg Config, ttl time.Duration) ([]*fakeNode, *Redlock, chan struct{}, int64) {
	nodes := newFakeNodes(5)
	for i := 0; i < 3; i++ {
		nodes[i].counter["k"] = 10
	}
	nodes[3].hang = make(chan struct{})
	hang4 := make(chan struct{})
	nodes[4].hang = hang4
	r := New(asNodes(nodes), cfg)
	h := hold("a")
	h.TTL = ttl
	g, err := r.Acquire(context.Background(), "k", h)
	if err != nil || g.Fence != 11 {
		t.Fatalf("grant: %+v %v, want fence 11", g, err)
	}
	nodes[3].mu.Lock()
	close(nodes[3].hang)
	nodes[3].hang = nil
	nodes[3].mu.Unlock()
	waitFor(t, "node 3's late take", func() bool { tok, f, _ := entryOf(nodes[3], "k"); return tok == "a" && f == 1 })
	return nodes, r, hang4, g.Fence
}

// Sequence 1: the grant is released and the same token granted again
// (another attempt) before the first grant's late commit lands on node 3:
// the commit must not change the fence node 3 records for the new grant.
func TestLateCommitLeavesARegrantOfTheSameToken(t *testing.T) {
	ctx := context.Background()
	nodes, r, hang4, _ := lateSetup(t, Config{NodeTimeout: 3 * time.Second}, 10*time.Second)
	defer r.Close()
	if _, err := r.Release(ctx, "k", "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release on node 3", func() bool { tok, _, _ := entryOf(nodes[3], "k"); return tok == "" })
	g2, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the regrant on node 3", func() bool { _, _, att := entryOf(nodes[3], "k"); return att == g2.Attempt })
	close(hang4)
	waitFor(t, "the first grant's late commit", func() bool { nodes[3].mu.Lock(); defer nodes[3].mu.Unlock(); return nodes[3].commits >= 2 })
	if _, f, _ := entryOf(nodes[3], "k"); f != g2.Fence {
		t.Fatalf("node 3 records fence %d for the regrant, told %d", f, g2.Fence)
	}
}

// Sequence 2: released and taken by another token before the late commit:
// the commit raises the counter only.
func TestLateCommitLeavesAnotherTokensGrant(t *testing.T) {
	ctx := context.Background()
	nodes, r, hang4, f1 := lateSetup(t, Config{NodeTimeout: 3 * time.Second}, 10*time.Second)
	defer r.Close()
	if _, err := r.Release(ctx, "k", "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release on node 3", func() bool { tok, _, _ := entryOf(nodes[3], "k"); return tok == "" })
	g2, err := r.Acquire(ctx, "k", hold("b"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b on node 3", func() bool { tok, _, _ := entryOf(nodes[3], "k"); return tok == "b" })
	close(hang4)
	waitFor(t, "the late commit", func() bool { nodes[3].mu.Lock(); defer nodes[3].mu.Unlock(); return nodes[3].counter["k"] >= f1 })
	time.Sleep(20 * time.Millisecond)
	if tok, f, _ := entryOf(nodes[3], "k"); tok != "b" || f != g2.Fence {
		t.Fatalf("node 3: %q fence %d, want b's %d", tok, f, g2.Fence)
	}
}

// Sequence 3: another instance retries the same token (not fresh) while
// the first grant's commit to node 3 is pending: node 3's hold is then
// refreshed by the retry's attempt; the commit only raises it to the
// fence the holder was told.
func TestLateCommitAfterARetryByAnotherInstance(t *testing.T) {
	ctx := context.Background()
	nodes, r, hang4, f1 := lateSetup(t, Config{NodeTimeout: 3 * time.Second}, 10*time.Second)
	defer r.Close()
	r2 := New(asNodes(nodes[:4]), Config{NodeTimeout: 3 * time.Second}) // node 4 hung for it too
	defer r2.Close()
	g2, err := r2.Acquire(ctx, "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	close(hang4)
	waitFor(t, "the late commit", func() bool { nodes[3].mu.Lock(); defer nodes[3].mu.Unlock(); return nodes[3].commits >= 1 })
	_, f, _ := entryOf(nodes[3], "k")
	if f < f1 || f != g2.Fence {
		t.Fatalf("node 3 records %d; first grant %d, retry told %d", f, f1, g2.Fence)
	}
}

// Sequence 4: the key expires on node 3 and the same token takes it again
// (a new grant) before the late commit lands.
func TestLateCommitAfterExpiryAndRetake(t *testing.T) {
	ctx := context.Background()
	nodes, r, hang4, _ := lateSetup(t, Config{NodeTimeout: 3 * time.Second}, 300*time.Millisecond)
	defer r.Close()
	waitFor(t, "expiry", func() bool { tok, _, _ := entryOf(nodes[3], "k"); return tok == "" })
	h := hold("a")
	g2, err := r.Acquire(ctx, "k", h)
	if err != nil {
		t.Fatal(err)
	}
	close(hang4)
	waitFor(t, "the late commit", func() bool { nodes[3].mu.Lock(); defer nodes[3].mu.Unlock(); return nodes[3].commits >= 1 })
	time.Sleep(20 * time.Millisecond)
	if _, f, _ := entryOf(nodes[3], "k"); f != g2.Fence {
		t.Fatalf("node 3 records %d, the retake was told %d", f, g2.Fence)
	}
}

// Sequence 5: node 3 misses the release (down), and the same token is
// granted again (not fresh) with node 3 answering late: it refreshes the
// hold it still has (Mine, with the first grant's odd fence 1) for the new
// attempt. The new grant was agreed (fence 12) by nodes 0-2; node 3 must
// end up recording 12, not the 1 it had nor the 11 the first grant's late
// commit raises it to.
func TestLateMineRefreshGetsTheRegrantsFence(t *testing.T) {
	ctx := context.Background()
	nodes, r, hang4, _ := lateSetup(t, Config{NodeTimeout: 3 * time.Second}, 10*time.Second)
	defer r.Close()
	nodes[3].mu.Lock()
	nodes[3].down = true
	nodes[3].mu.Unlock()
	if _, err := r.Release(ctx, "k", "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	hang3 := make(chan struct{})
	nodes[3].mu.Lock()
	nodes[3].down, nodes[3].hang = false, hang3
	nodes[3].mu.Unlock()
	g2, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil || g2.Fence != 12 {
		t.Fatalf("regrant: %+v %v, want fence 12 from nodes 0-2", g2, err)
	}
	close(hang3)
	waitFor(t, "the refresh on node 3", func() bool { _, _, att := entryOf(nodes[3], "k"); return att == g2.Attempt })
	close(hang4)
	waitFor(t, "node 3 records the regrant's fence", func() bool { _, f, _ := entryOf(nodes[3], "k"); return f == g2.Fence })
}

// higherLateSetup: nodes 0-2 agree on fence 11 for a's grant; node 3
// (counter 50) answers late and takes the key with fence 51; node 4
// hangs, so the grant's settle has not yet committed 11 to node 3 when
// the test acts.
func higherLateSetup(t *testing.T) ([]*fakeNode, *Redlock, int64) {
	nodes := newFakeNodes(5)
	for i := 0; i < 3; i++ {
		nodes[i].counter["k"] = 10
	}
	nodes[3].counter["k"] = 50
	hang3, hang4 := make(chan struct{}), make(chan struct{})
	nodes[3].hang, nodes[4].hang = hang3, hang4
	t.Cleanup(func() { close(hang4) })
	r := New(asNodes(nodes), Config{NodeTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = r.Close() })
	g, err := r.Acquire(context.Background(), "k", hold("a"))
	if err != nil || g.Fence != 11 {
		t.Fatalf("grant: %+v %v, want fence 11", g, err)
	}
	nodes[3].mu.Lock()
	nodes[3].hang = nil
	nodes[3].mu.Unlock()
	close(hang3)
	waitFor(t, "node 3's late take", func() bool { tok, f, _ := entryOf(nodes[3], "k"); return tok == "a" && f == 51 })
	return nodes, r, g.Fence
}

// A retry of a's grant (LOCK … TOKEN, not fresh) while node 3 records 51
// for it: the first majority to answer (node 2 is slow) is nodes 0, 1 and
// 3, which disagree; the retry hears node 2 too, and answers the grant's
// own fence, 11. Node 3 keeps 51 (never lowered); LOCKINFO reads 11.
func TestRetryAnswersItsGrantsFenceOverALateHigherOne(t *testing.T) {
	nodes, r, first := higherLateSetup(t)
	nodes[2].mu.Lock()
	nodes[2].delay = 100 * time.Millisecond
	nodes[2].mu.Unlock()
	g, err := r.Acquire(context.Background(), "k", hold("a"))
	if err != nil || g.Fence != first {
		t.Fatalf("retry: %+v %v, want the grant's fence %d", g, err, first)
	}
	for i, want := range []int64{first, first, first, 51} {
		if tok, f, _ := entryOf(nodes[i], "k"); tok != "a" || f != want {
			t.Errorf("node %d holds %q with fence %d, want a with %d", i, tok, f, want)
		}
	}
	if h, ok, err := r.Inspect(context.Background(), "k"); err != nil || !ok || h.Fence != first {
		t.Errorf("inspect: %+v %v %v, want the grant's fence %d", h, ok, err, first)
	}
}

// The same retry where only that bare majority answers (node 2 is down,
// node 4 hangs): no majority of the nodes agrees, and the retry answers
// the largest fence they record, which no earlier grant is above.
func TestRetryThatHearsABareMajorityTakesTheLargestFence(t *testing.T) {
	nodes, r, _ := higherLateSetup(t)
	nodes[2].setDown(true)
	g, err := r.Acquire(context.Background(), "k", hold("a"))
	if err != nil || g.Fence != 51 {
		t.Fatalf("retry: %+v %v, want fence 51", g, err)
	}
}
