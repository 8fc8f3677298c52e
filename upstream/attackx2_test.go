package upstream

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on the meta that outlives its key (b22bd41, 931c331, 8ec7bdf,
// d71bafb) and the 2 s heal window (2e8d76d), on real nodes.

// TestAttackX2ReleaseSpreadOverALongerNodeTimeout: a release through an
// instance with a longer node timeout (C, node_timeout_ms 15000) lands on
// node 2 at once and on node 0 some 8 s later, within C's node timeout
// (node 1 is cut from C): C decides it. a's meta on node 2 was written by
// its grant through A (automatic node timeout: a 2 s lease and a 5 s
// grace), and A's renewals of a meanwhile find node 2 released and do not
// write it again, so that meta ended about 7 s after the grant. A renewal
// of a through B (automatic) is granted by nodes 0 and 1 just before the
// release lands on node 0; its extension to node 2, held on B's link,
// lands there after the release is decided, within 2 s of the renewal's
// start. When a release left the hold's own meta (before 8ec7bdf; seen
// failing with release.lua writing its blank meta only where the hold had
// none), a's renewals found node 2 free with no meta once that meta ended
// (A's last ones in the loop, or B's), and the heal took node 2 for a:
// with node 1, which the release missed, a, released, held a majority
// again (LOCKINFO showed a with fence 1) — the residue
// backends-and-safety.md still describes for a release through an
// instance with a longer node timeout than the meta's writer. The
// release's blank meta has the releasing instance's own grace (two of its
// node timeouts and a second), which covers its own spread: the extension
// answers "not held".
func TestAttackX2ReleaseSpreadOverALongerNodeTimeout(t *testing.T) {
	backends := map[string]func(t *testing.T) []string{
		"redis": func(t *testing.T) []string {
			var addrs []string
			for _, s := range redistest.StartN(t, 3, redistest.Options{}) {
				addrs = append(addrs, s.Addr())
			}
			return addrs
		},
		"miniredis": func(t *testing.T) []string { return startEmbedded(t, 3).Addrs() },
	}
	for name, start := range backends {
		t.Run(name, func(t *testing.T) { releaseSpreadOverALongerNodeTimeout(t, start(t)) })
	}
}

func releaseSpreadOverALongerNodeTimeout(t *testing.T, addrs []string) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	over := func(cfg quorum.Config, wrap func(i int, n quorum.Node) quorum.Node) *quorum.Redlock {
		nodes := make([]quorum.Node, len(addrs))
		for i, a := range addrs {
			nodes[i] = wrap(i, newNode(t, RedisOptions{Addr: a}))
		}
		r := quorum.New(nodes, cfg)
		t.Cleanup(func() { r.Close() })
		return r
	}
	plain := func(_ int, n quorum.Node) quorum.Node { return n }
	ext, rel := newGate(quorum.OpExtend, "k"), newGate(quorum.OpRelease, "k")
	rA, rD := over(quorum.Config{}, plain), over(quorum.Config{}, plain)
	rB := over(quorum.Config{}, func(i int, n quorum.Node) quorum.Node {
		if i == 2 {
			ext.Node = n
			return ext
		}
		return n
	})
	rC := over(quorum.Config{NodeTimeout: 15 * time.Second}, func(i int, n quorum.Node) quorum.Node {
		switch i {
		case 0:
			rel.Node = n
			return rel
		case 1:
			return cutNode{n}
		}
		return n
	})
	const lease = 2 * time.Second
	granted := time.Now()
	ga, err := rA.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", addrs...)
	type result struct {
		ok  bool
		err error
	}
	released := make(chan result, 1)
	go func() {
		ok, err := rC.Release(ctx, "k", "a", nil, nil)
		released <- result{ok, err}
	}()
	select {
	case <-rel.pending:
	case <-time.After(testTimeout):
		t.Fatal("no release sent to node 0")
	}
	raw2 := rawClient(t, addrs[2])
	eventually(t, testTimeout, "the release deletes a on node 2", func() bool {
		return raw2.Exists(ctx, "k").Val() == 0
	})
	// a lives on nodes 0 and 1 past the end of the meta its grant wrote on
	// node 2 (the lease and A's grace), renewed through A.
	writerGrace := 2*quorum.MaxNodeTimeout + time.Second
	for time.Since(granted) < lease+writerGrace+300*time.Millisecond {
		if _, err := rA.Extend(ctx, "k", "a", lease, ""); err != nil {
			t.Fatalf("a's renewal through A, %v after its grant: %v", time.Since(granted), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := rB.Extend(ctx, "k", "a", lease, ""); err != nil {
		t.Fatalf("a's renewal through B: %v", err)
	}
	select {
	case <-ext.pending:
	case <-time.After(testTimeout):
		t.Fatal("no extension sent to node 2")
	}
	rel.gate <- struct{}{}
	if r := <-released; !r.ok || r.err != nil {
		t.Fatalf("a's release through C, %v after its grant: %v %v, want released (nodes 0 and 2)", time.Since(granted), r.ok, r.err)
	}
	ext.gate <- struct{}{}
	rep := <-ext.landed
	if rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if rep.FreeAt != 0 || rep.TTL != 0 {
		t.Errorf("a's extension, landing on node 2 after a's release: %+v, want not held "+
			"(no FreeAt: a heal from it gives a, released, nodes 1 and 2)", rep)
	}
	// A heal, if one was decided, lands within moments; a bounded wait.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if v := raw2.Get(ctx, "k").Val(); v == "a" {
			t.Errorf("node 2 holds a again after its release (fence %d)", ga.Fence)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h, ok, err := rD.Inspect(ctx, "k"); err != nil || ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release: %+v %v %v, want a not shown", h, ok, err)
	}
}

// TestAttackX2LateBoundReleaseKeepsTheNewHoldsMeta: a release leaves a
// meta that describes nobody only where it deletes the hold. Attempt x of
// token a takes the key and is released; attempt y of a takes it again (a
// LOCK … TOKEN after the release) with a higher fence; then calls of x
// land late: x's release carried on to a silent node (bound to x, as
// Redlock's carried op is), and x's rollback. Both must leave y's hold and
// its meta as they are: a blank meta there would hide y's fence (LOCKINFO
// fence 0, an extension answering fence 0 and healing nothing, a
// LOCK … TOKEN refresh answering the node's counter as y's fence). So must
// a release of a token that does not hold the key (b's release over a's
// hold). Seen failing with release.lua's blank meta written before its
// check of the attempt: the meta blank, Inspect fence 0, and y's bound
// extension answered not held (its renewal would lose the lock).
func TestAttackX2LateBoundReleaseKeepsTheNewHoldsMeta(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		const grace = 3 * time.Second
		take := func(attempt string) int64 {
			t.Helper()
			r := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", 10*time.Second), Attempt: attempt, MetaFor: grace})
			if r.Err != nil || r.Claim.State != quorum.Acquired {
				t.Fatalf("acquire %s: %+v", attempt, r)
			}
			return r.Claim.Fence
		}
		fx := take("x")
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", MarkFor: time.Minute, MetaFor: grace}); r.Err != nil || !r.OK {
			t.Fatalf("release of x's hold: %+v", r)
		}
		fy := take("y")
		if fy <= fx {
			t.Fatalf("y's fence %d, want above x's %d", fy, fx)
		}
		check := func(after string) {
			t.Helper()
			if v := raw.Get(ctx, "k").Val(); v != "a" {
				t.Fatalf("after %s: the key is %q, want y's hold (a)", after, v)
			}
			m, err := readMeta(ctx, raw, "k")
			if err != nil || m["token"] != "a" || m["fence"] != strconv.FormatInt(fy, 10) || m["attempt"] != "y" {
				t.Errorf("after %s: the meta is %v %v, want y's (token a, fence %d, attempt y)", after, m, err, fy)
			}
			if e, ok, err := n.Inspect(ctx, "k"); err != nil || !ok || e.Token != "a" || e.Fence != fy {
				t.Errorf("after %s: Inspect %+v %v %v, want a with fence %d", after, e, ok, err, fy)
			}
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", Attempt: "x", MarkFor: time.Minute, MetaFor: grace}); r.Err != nil || r.OK {
			t.Errorf("x's carried release, landing over y's hold: %+v, want nothing deleted", r)
		}
		check("x's carried release")
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", Rollback: true, Attempt: "x",
			Undo: "x", UndoFor: 10 * time.Second, MetaFor: grace}); r.Err != nil || r.OK {
			t.Errorf("x's rollback, landing over y's hold: %+v, want nothing deleted", r)
		}
		check("x's rollback")
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "b", MarkFor: time.Minute, MetaFor: grace}); r.Err != nil || r.OK {
			t.Errorf("b's release over a's hold: %+v, want nothing deleted", r)
		}
		check("b's release")
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpExtend, Key: "k", Token: "a", Attempt: "y", MarkFor: time.Minute, MetaFor: grace}); r.Err != nil || r.TTL <= 0 || r.Entry.Fence != fy {
			t.Errorf("y's extension: %+v, want held with fence %d", r, fy)
		}
	})
}

// TestAttackX2RestartLosesTheReleasesMeta is quorum's test of that name on
// three redis-servers without fsync (max_lease_ms 1 s): a is granted on
// every node through A; a's release through C (node_timeout_ms 3000, its
// link to node 1 cut) deletes a on node 2, leaving its blank meta, and is
// held on its way to node 0; node 2 restarts empty, losing that meta. A
// renews a every 100 ms meanwhile (nodes 0 and 1 hold it). Once A counts
// node 2 again (1 s after its start), a renewal finds the key free there
// with no meta; a heal from it took node 2 for a, and when the release
// then landed on node 0 and C decided it, a, released, held nodes 1 and 2
// (LOCKINFO showed it). A renewal heals onto a node restarted without
// fsync only from the grace after its start.
func TestAttackX2RestartLosesTheReleasesMeta(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const lease = time.Second
	rel := newGate(quorum.OpRelease, "k")
	var nodesA, nodesC []quorum.Node
	for i, s := range servers {
		nodesA = append(nodesA, newNode(t, RedisOptions{Addr: s.Addr()}))
		var n quorum.Node = newNode(t, RedisOptions{Addr: s.Addr()})
		switch i {
		case 0:
			rel.Node = n
			n = rel
		case 1:
			n = cutNode{n}
		}
		nodesC = append(nodesC, n)
	}
	cfg := quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond}
	rA := quorum.New(nodesA, cfg)
	t.Cleanup(func() { rA.Close() })
	cfg.NodeTimeout = 3 * time.Second
	rC := quorum.New(nodesC, cfg)
	t.Cleanup(func() { rC.Close() })
	waitCounted(t, rA, 30*time.Second, true, true, true)
	eventually(t, 30*time.Second, "C counts nodes 0 and 2", func() bool {
		c := rC.Counted()
		return c[0] && c[2]
	})
	if _, err := rA.Acquire(ctx, "k", hold("a", lease)); err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	sent, released := releaseHeldUp(t, rC, rel, servers[2].Addr(), "node 0")
	raw2 := rawClient(t, servers[2].Addr())
	restartEmpty(t, servers[2])
	for time.Since(sent) < 2500*time.Millisecond {
		if _, err := rA.Extend(ctx, "k", "a", lease, ""); err != nil {
			t.Fatalf("a's renewal through A, %v after the release was sent: %v", time.Since(sent), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rel.gate <- struct{}{}
	if err := <-released; err != nil {
		t.Fatalf("a's release through C, decided by nodes 0 and 2 (%v after it was sent): %v", time.Since(sent), err)
	}
	if v := raw2.Get(ctx, "k").Val(); v == "a" {
		t.Errorf("node 2, restarted after a's release there, holds a again (counted by A: %v)", rA.Counted())
	}
	if h, ok, err := rA.Inspect(ctx, "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release: a holds it with fence %d", h.Fence)
	}
}

// releaseHeldUp releases a's hold of k through rC in the background, waits
// until rel holds the release up on its way to the node named held, and
// until it deleted the key on the node at deleted; it returns when the
// release was sent and where its outcome comes ("not held" an error).
func releaseHeldUp(t *testing.T, rC *quorum.Redlock, rel *gatedNode, deleted, held string) (time.Time, <-chan error) {
	t.Helper()
	ctx := t.Context()
	sent := time.Now()
	released := make(chan error, 1)
	go func() {
		ok, err := rC.Release(ctx, "k", "a", nil, nil)
		if err == nil && !ok {
			err = errors.New("not held")
		}
		released <- err
	}()
	select {
	case <-rel.pending:
	case <-time.After(testTimeout):
		t.Fatal("no release sent to " + held)
	}
	raw := rawClient(t, deleted)
	eventually(t, testTimeout, "the release deletes a on "+deleted, func() bool {
		return raw.Exists(ctx, "k").Val() == 0
	})
	return sent, released
}
