package quorum

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// TestAttackExtensionOfALongerNodeTimeout: the grace a meta outlives its
// key by (metaGrace) is the writing instance's: two of its node timeouts
// (at least 2 s each) and a second. An instance with a longer node
// timeout renews with extensions whose answers count that much longer, so
// one held up on its way can land after the meta is gone. a is granted
// through A (automatic node timeout: grace 5 s) on every node with a 1 s
// lease; a's renewal through B (node_timeout_ms 10000) to 10 s is granted
// by nodes 0 and 1, its extension to node 2 held on B's link; a is
// released through C (link to node 1 cut: nodes 0 and 2 delete it), b is
// granted through C by nodes 0 and 2 (fence 11, a 500 ms lease) and
// released. Some 6 s later both metas on node 2 are gone; the extension
// lands there, within B's 10 s, finds the key free with no meta, and the
// heal from it takes node 2 with a's fence 10: with node 1, which the
// release missed, a, released, holds a majority with a fence below b's.
func TestAttackExtensionOfALongerNodeTimeout(t *testing.T) {
	ctx := context.Background()
	fs, hs := newHealNodes(3)
	for _, f := range fs {
		f.counter["k"] = 9
	}
	b2, c1 := newLink(hs[2]), newLink(hs[1])
	rA := New(asNodes(fs), Config{})
	rB := New([]Node{hs[0], hs[1], b2}, Config{NodeTimeout: 10 * time.Second})
	rC := New([]Node{hs[0], c1, hs[2]}, Config{})
	rD := New(asNodes(fs), Config{NodeTimeout: time.Second})
	defer func() {
		b2.let()
		for _, r := range []*Redlock{rA, rB, rC, rD} {
			r.Close()
		}
	}()
	short := func(token string, ttl time.Duration) engine.Hold {
		return engine.Hold{Token: token, TTL: ttl, Mode: engine.Lease}
	}
	ga, err := rA.Acquire(ctx, "k", short("a", time.Second))
	if err != nil || ga.Fence != 10 {
		t.Fatalf("a: %+v %v, want 10", ga, err)
	}
	waitFor(t, "a on every node", func() bool { return holders(fs, "k", "a") == 3 })
	b2.hold(OpExtend)
	if _, err := rB.Extend(ctx, "k", "a", 10*time.Second, ""); err != nil {
		t.Fatalf("a's RENEW: %v", err)
	}
	c1.setCut(true)
	if ok, err := rC.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release a: %v %v", ok, err)
	}
	gb, err := rC.Acquire(ctx, "k", short("b", 500*time.Millisecond))
	if err != nil || gb.Fence != 11 {
		t.Fatalf("b: %+v %v, want 11", gb, err)
	}
	if ok, err := rC.Release(ctx, "k", "b", nil, nil); !ok || err != nil {
		t.Fatalf("release b: %v %v", ok, err)
	}
	gone := time.Now().Add(10 * time.Second)
	for {
		fs[2].mu.Lock()
		left := fs[2].metaLeft("k")
		fs[2].mu.Unlock()
		if !left {
			break
		}
		if time.Now().After(gone) {
			t.Fatal("node 2's meta still there after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	b2.let()
	waitFor(t, "the extension lands on node 2", func() bool { return hs[2].extendsApplied() == 1 })
	bgDone(t, rB)
	if tok, f, _ := entryOf(fs[2], "k"); tok == "a" {
		t.Errorf("the heal took node 2 for a, released, with fence %d after b's grant (fence %d)", f, gb.Fence)
	}
	if h, ok, err := rD.Inspect(ctx, "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release and b's grant (fence %d): a holds it with fence %d", gb.Fence, h.Fence)
	}
}
