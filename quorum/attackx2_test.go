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

// Attacks on the meta that outlives its key and the 2 s heal window
// (freeWithin, 2e8d76d).

// slowReply is one instance's link to a node on which the answers of kind
// come back only once let goes: the call lands on the node at once.
// notify, if not nil, gets a value once each such answer was handed on.
type slowReply struct {
	Node
	kind   OpKind
	gate   chan struct{}
	notify chan struct{}
}

func (s *slowReply) Do(ctx context.Context, op *Op, tag int, done Sink) {
	if op.Kind != s.kind {
		s.Node.Do(ctx, op, tag, done)
		return
	}
	mine := make(Replies, 1)
	s.Node.Do(ctx, op, tag, mine)
	go func() {
		rep := <-mine
		if s.gate != nil {
			<-s.gate
		}
		done.Put(rep)
		if s.notify != nil {
			s.notify <- struct{}{}
		}
	}()
}

// TestAttackX2LateFreeAnswerBeforeTheVerdict: freeWithin holds for a "free"
// answer that comes before the renewal's verdict, not only for one that
// comes after it (heal's afterward, TestAttackExtensionOfALongerNodeTimeout).
// a is granted fence 10 on every node with a 1 s lease; a's renewal to
// 10 s through B (node_timeout_ms 10000) lands on nodes 0 and 1 at once,
// but node 1's answer is held on its way back; its extension to node 2 is
// held on its way there. a is released through C (link to node 1 cut:
// nodes 0 and 2 delete it), b is granted through C by nodes 0 and 2 (fence
// 11) and released. Once the meta on node 2 is gone (C's grace, 5 s), the
// extension lands there, finds the key free, and its answer reaches B
// while B still waits for a majority; then node 1's answer comes, and the
// renewal is granted. A heal from node 2's answer, which came more than
// 2 s after the renewal's start, takes node 2 with a's fence 10 after b's
// 11, and a, released, holds nodes 1 and 2 (seen failing with renewal.add
// counting every "free" answer: node 2 healed for a, LOCKINFO showed it).
func TestAttackX2LateFreeAnswerBeforeTheVerdict(t *testing.T) {
	ctx := context.Background()
	fs, hs := newHealNodes(3)
	for _, f := range fs {
		f.counter["k"] = 9
	}
	b2, c1 := newLink(hs[2]), newLink(hs[1])
	slow1 := &slowReply{Node: hs[1], kind: OpExtend, gate: make(chan struct{})}
	put2 := &slowReply{Node: b2, kind: OpExtend, notify: make(chan struct{}, 1)}
	rA := New(asNodes(fs), Config{})
	rB := New([]Node{hs[0], slow1, put2}, Config{NodeTimeout: 10 * time.Second})
	rC := New([]Node{hs[0], c1, hs[2]}, Config{})
	rD := New(asNodes(fs), Config{NodeTimeout: time.Second})
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(slow1.gate)
		}
	}
	defer func() {
		b2.let()
		open()
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
	renewed := make(chan error, 1)
	go func() {
		_, err := rB.Extend(ctx, "k", "a", 10*time.Second, "")
		renewed <- err
	}()
	waitFor(t, "the renewal lands on nodes 0 and 1", func() bool {
		return hs[0].extendsApplied() == 1 && hs[1].extendsApplied() == 1 && b2.heldCalls() == 1
	})
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
	select {
	case <-put2.notify:
	case <-time.After(5 * time.Second):
		t.Fatal("node 2's answer to the renewal not handed on within 5 s")
	}
	select {
	case err := <-renewed:
		t.Fatalf("the renewal decided before node 1's answer: %v", err)
	default:
	}
	open()
	if err := <-renewed; err != nil {
		t.Fatalf("a's renewal, granted by nodes 0 and 1: %v", err)
	}
	bgDone(t, rB)
	if tok, f, _ := entryOf(fs[2], "k"); tok == "a" {
		t.Errorf("the heal took node 2 for a, released, with fence %d after b's grant (fence %d)", f, gb.Fence)
	}
	if h, ok, err := rD.Inspect(ctx, "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release and b's grant (fence %d): a holds it with fence %d", gb.Fence, h.Fence)
	}
}

// incarnate is a healNode whose answers to what healNode serves itself
// (extensions, releases, heals) carry the node's run id, as the fake's
// own answers do, so that they count under the restart rule.
type incarnate struct{ *healNode }

type stamped struct {
	Sink
	run string
}

func (s stamped) Put(r Reply) {
	r.Incarnation = s.run
	s.Sink.Put(r)
}

func (h incarnate) Do(ctx context.Context, op *Op, tag int, done Sink) {
	switch op.Kind {
	case OpExtend, OpRelease, OpHeal:
		h.fakeNode.mu.Lock()
		run := h.run
		h.fakeNode.mu.Unlock()
		h.healNode.Do(ctx, op, tag, stamped{done, run})
	default:
		h.healNode.Do(ctx, op, tag, done)
	}
}

// TestAttackX2RestartLosesTheReleasesMeta: a node that restarts empty
// loses the meta a release left there for the grace, and the restart rule
// held it out only max_lease_ms (here 1 s) after its start: counted again
// while the release was still on its way to another node, it answered a
// renewal's extension "free", and the heal gave the released holder the
// node back. a is granted fence 10 on every node (a 1 s lease, renewed
// through A); a's release through C (node_timeout_ms 3000, link to node
// 1 cut) deletes it on node 2 at once and is held on its way to node 0;
// node 2 restarts empty. Within C's 3 s node timeout, A counts node 2
// again, A's renewal is granted by nodes 0 and 1 and heals node 2; then
// the release lands on node 0 and C decides it. a, released, holds nodes
// 1 and 2 (seen failing before healsFrom: node 2 healed for a, LOCKINFO
// showed a with fence 10). A renewal now heals onto node 2 only from the
// grace after its start.
func TestAttackX2RestartLosesTheReleasesMeta(t *testing.T) {
	ctx := context.Background()
	fs, hs := newHealNodes(3)
	nodes := make([]Node, 3)
	for i, f := range fs {
		f.run, f.uptime, f.vetted = fmt.Sprintf("run%d", i), time.Hour, fmt.Sprintf("run%d", i)
		f.counter["k"] = 9
		nodes[i] = incarnate{hs[i]}
	}
	c0, c1 := newLink(nodes[0]), newLink(nodes[1])
	const lease = time.Second
	cfg := Config{MaxLease: lease, StatusEvery: 10 * time.Millisecond}
	rA := New(nodes, cfg)
	cfgC := cfg
	cfgC.NodeTimeout = 3 * time.Second // node_timeout_ms 3000: the release lands on node 0 well within it
	rC := New([]Node{c0, c1, nodes[2]}, cfgC)
	defer func() {
		c0.let()
		rA.Close()
		rC.Close()
	}()
	eventually(t, 5*time.Second, "every node counted", func() bool {
		return slices.Equal(rA.Counted(), []bool{true, true, true}) && slices.Equal(rC.Counted(), []bool{true, true, true})
	})
	ga, err := rA.Acquire(ctx, "k", engine.Hold{Token: "a", TTL: lease, Mode: engine.Lease})
	if err != nil || ga.Fence != 10 {
		t.Fatalf("a: %+v %v, want 10", ga, err)
	}
	waitFor(t, "a on every node", func() bool { return holders(fs, "k", "a") == 3 })
	c0.hold(OpRelease)
	c1.setCut(true)
	sent := time.Now()
	released := make(chan error, 1)
	go func() {
		ok, err := rC.Release(ctx, "k", "a", nil, nil)
		if err == nil && !ok {
			err = errors.New("not held")
		}
		released <- err
	}()
	waitFor(t, "the release deletes a on node 2", func() bool { return !fs[2].holds("k", "a") && c0.heldCalls() == 1 })
	fs[2].restartEmpty("run2-b")
	// a lives on nodes 0 and 1, renewed through A, until the release
	// lands on node 0 (within C's node timeout).
	for time.Since(sent) < 1500*time.Millisecond {
		if _, err := rA.Extend(ctx, "k", "a", lease, ""); err != nil {
			t.Fatalf("a's renewal through A, %v after the release was sent: %v", time.Since(sent), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c0.let()
	if err := <-released; err != nil {
		t.Fatalf("a's release through C, decided by nodes 0 and 2: %v", err)
	}
	// A heal decided by A's last renewal lands within moments: a bounded
	// wait (rA.bg also runs the status reads, so it is never done).
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if tok, f, _ := entryOf(fs[2], "k"); tok == "a" {
			t.Errorf("node 2, restarted after a's release there, holds a again with fence %d", f)
			break
		}
	}
	if h, ok, err := rA.Inspect(ctx, "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release: a holds it with fence %d", h.Fence)
	}
}
