package quorum

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Attacks on the raise-only fence design (b1873db, a4d7a09): a recorded
// fence is only ever raised; a LOCK … TOKEN retry and LOCKINFO answer the
// fence a majority of the nodes record, waiting for the other nodes when
// the first majority disagrees, and fall back to the largest where no
// value has a majority. What must hold: every fence answered for a grant
// (its own, a retry's, LOCKINFO's) is above every earlier grant's and
// below every later grant's.

// healNode is a fakeNode that also serves what heals need, as the
// scripts do: an extension answers the hold's fence, mode, name and
// attempt, or, where the key is free, the node's clock, written as the
// key's release mark (extend.lua); a release that is not a rollback marks
// a key it finds free or another's, and a release that deletes a hold
// marks nothing (release.lua); a heal takes a free key with the fence and
// attempt it carries, raising the counter to the fence, unless a mark is
// above the moment the extension found the key free (heal.lua); an acquire
// or a heal that takes the key raises its mark by one where there is one.
// A hold's meta outlives it by Op.MetaFor (fakeNode.metas; a release
// that deletes the hold leaves one for Op.MetaFor): an extension
// that finds the key free beside a meta answers that it is not held, with
// no FreeAt (extend.lua).
type healNode struct {
	*fakeNode
	marks map[string]int64 // under fakeNode.mu: key -> ms of the node's clock
	heals int              // under fakeNode.mu: heals applied
	// extends is the extensions applied, under fakeNode.mu.
	extends int
}

func (h *healNode) extendsApplied() int {
	h.fakeNode.mu.Lock()
	defer h.fakeNode.mu.Unlock()
	return h.extends
}

func (h *healNode) healsApplied() int {
	h.fakeNode.mu.Lock()
	defer h.fakeNode.mu.Unlock()
	return h.heals
}

func newHealNodes(n int) ([]*fakeNode, []*healNode) {
	fs := newFakeNodes(n)
	hs := make([]*healNode, n)
	for i, f := range fs {
		h := &healNode{fakeNode: f, marks: map[string]int64{}}
		f.taken = h.taken
		hs[i] = h
	}
	return fs, hs
}

func nowMS() int64 { return time.Now().UnixMilli() }

// mark writes key's release mark: the node's clock, above any mark there.
func (h *healNode) mark(key string) int64 {
	at := nowMS()
	if m := h.marks[key]; m >= at {
		at = m + 1
	}
	h.marks[key] = at
	return at
}

// taken raises key's release mark where there is one, as acquire.lua and
// heal.lua do when they take the key.
func (h *healNode) taken(key string) {
	if m, ok := h.marks[key]; ok {
		h.marks[key] = m + 1
	}
}

func (h *healNode) Do(ctx context.Context, op *Op, tag int, done Sink) {
	switch op.Kind {
	case OpExtend, OpRelease, OpHeal:
	default:
		h.fakeNode.Do(ctx, op, tag, done)
		return
	}
	h.fakeNode.mu.Lock()
	down := h.down
	h.fakeNode.mu.Unlock()
	if down {
		go func() { done.Put(Reply{Tag: tag, Err: errDown}) }()
		return
	}
	go func() {
		r := Reply{Tag: tag}
		if err := h.enter(ctx); err != nil {
			r.Err = err
			done.Put(r)
			return
		}
		f := h.fakeNode
		e := f.live(op.Key)
		switch op.Kind {
		case OpExtend:
			h.extends++
			switch {
			case e == nil && f.metaLeft(op.Key): // released (or ended) here: heal nothing
			case e == nil:
				at := nowMS()
				if m := h.marks[op.Key]; m >= at {
					at = m + 1
				}
				if op.MarkFor > 0 {
					h.marks[op.Key] = at
				}
				r.FreeAt = at
			case e.Token != op.Token || op.Attempt != "" && e.attempt != op.Attempt:
			case op.Mode == engine.Bound && e.Mode == engine.Lease:
				r.TTL = -time.Millisecond
			default:
				ttl := op.TTL
				if ttl == 0 {
					ttl = e.ttl
				}
				e.ttl, e.expires, e.took = ttl, time.Now().Add(ttl), false
				f.keepMeta(op.Key, ttl, op.MetaFor)
				if op.Mode != "" {
					e.Mode = op.Mode
				}
				r.TTL, r.Entry, r.Attempt = ttl, e.Entry, e.attempt
			}
		case OpRelease:
			if op.Undo != "" && (e == nil || e.attempt != op.Undo) {
				f.undone[op.Undo] = true
			}
			switch {
			case e == nil || e.Token != op.Token:
				if !op.Rollback && op.MarkFor > 0 {
					h.mark(op.Key)
				}
			case op.Attempt != "" && (e.attempt != op.Attempt || op.Rollback && !e.took):
			default:
				delete(f.entries, op.Key)
				if op.MetaFor > 0 { // a meta that describes nobody, for the grace
					f.metas[op.Key] = time.Now().Add(op.MetaFor)
				}
				r.OK, r.Attempt = true, e.attempt
			}
		case OpHeal:
			h.heals++
			left := min(op.HealUntil-nowMS(), op.HealUntil-op.FreeAt)
			if e == nil && h.marks[op.Key] <= op.FreeAt && left > 0 {
				f.counter[op.Key] = max(f.counter[op.Key], op.Fence)
				ttl := time.Duration(left) * time.Millisecond
				f.entries[op.Key] = &fakeEntry{Entry{Token: op.Hold.Token, Fence: op.Fence, Mode: op.Hold.Mode, Name: op.Hold.Name},
					op.Hold.TTL, time.Now().Add(ttl), op.Attempt, false}
				r.TTL = ttl
				f.keepMeta(op.Key, ttl, op.MetaFor)
				h.taken(op.Key)
			}
		}
		f.mu.Unlock()
		done.Put(r)
	}()
}

// link is one instance's link to a node. Calls of the kinds it holds wait
// until let goes (a caller whose context ends first gets its error at
// once, and the call still lands once let through, as bytes held on a
// link do); while cut, calls fail at once and never land. Nothing waits
// beyond its caller's context.
type link struct {
	Node
	mu    sync.Mutex
	kinds map[OpKind]bool
	gate  chan struct{}
	held  int
	cut   bool
}

func newLink(n Node) *link { return &link{Node: n, kinds: map[OpKind]bool{}} }

// hold holds the calls of kinds from now on, until let.
func (l *link) hold(kinds ...OpKind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range kinds {
		l.kinds[k] = true
	}
	if l.gate == nil {
		l.gate = make(chan struct{})
	}
}

// let lets the held calls through, in no set order, and holds no more.
func (l *link) let() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gate != nil {
		close(l.gate)
	}
	l.gate, l.kinds = nil, map[OpKind]bool{}
}

func (l *link) setCut(c bool) { l.mu.Lock(); l.cut = c; l.mu.Unlock() }

func (l *link) heldCalls() int { l.mu.Lock(); defer l.mu.Unlock(); return l.held }

func (l *link) Do(ctx context.Context, op *Op, tag int, done Sink) {
	l.mu.Lock()
	cut, gate := l.cut, l.gate
	if !l.kinds[op.Kind] {
		gate = nil
	}
	if gate != nil {
		l.held++
	}
	l.mu.Unlock()
	switch {
	case cut:
		go func() { done.Put(Reply{Tag: tag, Err: errDown}) }()
	case gate != nil:
		go func() {
			select {
			case <-gate:
				l.Node.Do(ctx, op, tag, done)
			case <-ctx.Done():
				done.Put(Reply{Tag: tag, Err: ctx.Err()})
				<-gate
				l.Node.Do(context.Background(), op, tag, make(Replies, 1))
			}
		}()
	default:
		l.Node.Do(ctx, op, tag, done)
	}
}

// TestAttackRaiseHealAfterAnotherGrant: a renewal's heal, decided while
// its token held the lock, lands on a node after the token's release and
// another token's grant, and plants the renewal's old fence there; with a
// node that missed the release, the token's holds make a majority that
// records a fence below the other grant's.
//
// Three nodes (counters 9). a is granted fence 10 through A by nodes 0
// and 1; its acquire to node 2 is held on A's link. a's RENEW through B
// finds node 2 free, and its heal of node 2 is held on B's link. a's
// acquire then lands on node 2 (fence 10). a is released through C, whose
// link to node 1 is cut (nodes 0 and 2 decide it; the release on node 2
// deletes a hold and leaves no mark); b is granted fence 11 through C by
// nodes 0 and 2, and released. The heal lands on node 2, where the key is
// free. It must take nothing: a's acquire, which took the key after the
// renewal found it free, raised the mark (acquire.lua). Without that, the
// heal took node 2 with fence 10, nodes 1 and 2 held a with fence 10,
// LOCKINFO showed a, released, as the holder with 10, and a's LOCK … TOKEN
// through D (node 0 slow), a new grant after b's 11, answered 10.
func TestAttackRaiseHealAfterAnotherGrant(t *testing.T) {
	fs, hs, a2, b2, c1, rC := markStage(t)
	rD := New([]Node{hs[0], hs[1], hs[2]}, Config{NodeTimeout: 10 * time.Second})
	defer rD.Close()
	a2.let()
	waitFor(t, "a's acquire lands on node 2", func() bool { tok, f, _ := entryOf(fs[2], "k"); return tok == "a" && f == 10 })
	releaseGrantThenHeal(t, fs, hs, c1, b2, rC, rD, func() {
		waitFor(t, "the heal lands on node 2", func() bool { return hs[2].healsApplied() == 1 })
	})
}

// releaseGrantThenHeal releases a (fence 10) through rC with rC's link to
// node 1 cut (c1), grants b (fence 11) through rC and releases it, lets
// node 2's held heal or extension (on b2) land (landed waits until it
// did, and for the heal it may bring), and checks that a, released,
// does not come back: node 2 does not take the heal, LOCKINFO through rD
// does not show a, and a's LOCK … TOKEN through rD (node 0 slow) is a new
// grant above b's.
func releaseGrantThenHeal(t *testing.T, fs []*fakeNode, hs []*healNode, c1, b2 *link, rC, rD *Redlock, landed func()) {
	t.Helper()
	ctx := context.Background()
	c1.setCut(true)
	if ok, err := rC.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release a: %v %v", ok, err)
	}
	gb, err := rC.Acquire(ctx, "k", hold("b"))
	if err != nil || gb.Fence != 11 {
		t.Fatalf("b: %+v %v, want 11", gb, err)
	}
	if ok, err := rC.Release(ctx, "k", "b", nil, nil); !ok || err != nil {
		t.Fatalf("release b: %v %v", ok, err)
	}
	waitFor(t, "b's release", func() bool { return holders(fs, "k", "b") == 0 })
	b2.let()
	landed()
	if tok, f, _ := entryOf(fs[2], "k"); tok == "a" {
		t.Errorf("the heal took node 2 for a, released, with fence %d after b's grant (fence %d)", f, gb.Fence)
	}
	if h, ok, err := rD.Inspect(ctx, "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release and b's grant (fence %d): a holds it with fence %d", gb.Fence, h.Fence)
	}
	setDelay(fs[0], 100*time.Millisecond)
	g, err := rD.Acquire(ctx, "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= gb.Fence {
		t.Fatalf("a's LOCK after b's grant (fence %d) answered fence %d", gb.Fence, g.Fence)
	}
}

func setDelay(f *fakeNode, d time.Duration) { f.mu.Lock(); f.delay = d; f.mu.Unlock() }

func setHang(f *fakeNode, c chan struct{}) { f.mu.Lock(); f.hang = c; f.mu.Unlock() }

// lateHigh: n fake nodes (3 or 5); a's grant is agreed on fence 11 by the
// first majority (counters 10), and node late (counter 50), reached late
// (its call held on the link until the grant is decided), takes the key
// for the grant with fence 51, which it keeps: nothing lowers it. With 5
// nodes the others beyond the majority hang until hang is closed.
func lateHigh(t *testing.T, n int, cfg Config) (nodes []*fakeNode, r *Redlock, hang chan struct{}, late int) {
	t.Helper()
	return lateHighFor(t, n, cfg, hold("a"))
}

// lateHighFor is lateHigh with a's grant held as h.
func lateHighFor(t *testing.T, n int, cfg Config, h engine.Hold) (nodes []*fakeNode, r *Redlock, hang chan struct{}, late int) {
	t.Helper()
	nodes = newFakeNodes(n)
	late = n/2 + 1
	for i := range late {
		nodes[i].counter["k"] = 10
	}
	nodes[late].counter["k"] = 50
	hang = make(chan struct{})
	for i := late + 1; i < n; i++ {
		nodes[i].hang = hang
	}
	t.Cleanup(func() {
		select {
		case <-hang:
		default:
			close(hang)
		}
	})
	ns := asNodes(nodes)
	l := newLink(nodes[late])
	ns[late] = l
	l.hold(OpAcquire)
	r = New(ns, cfg)
	t.Cleanup(func() { _ = r.Close() })
	g, err := r.Acquire(context.Background(), "k", h)
	l.let()
	if err != nil || g.Fence != 11 {
		t.Fatalf("grant: %+v %v, want fence 11", g, err)
	}
	waitFor(t, "the late take", func() bool { tok, f, _ := entryOf(nodes[late], "k"); return tok == "a" && f == 51 })
	return nodes, r, hang, late
}

// TestAttackRaiseBareMajorityLockInfoBelowNextGrant: three nodes, a's grant
// (a 1 s lease) agreed on 11 by nodes 0 and 1, node 2 keeps its late 51.
// Node 1 is down: LOCKINFO hears a bare majority that disagrees (11, 51)
// and falls back to the largest, 51. The holder dies; once its leases
// have run out, b is granted. b's fence must be above every fence answered
// for a's grant, LOCKINFO's included (attack24: "a fence LOCKINFO shows
// that the holder was not given could be given to the next holder"); b,
// whose first majority is nodes 0 and 1 (counters 11), gets 12.
func TestAttackRaiseBareMajorityLockInfoBelowNextGrant(t *testing.T) {
	ctx := context.Background()
	a := hold("a")
	a.TTL = time.Second
	nodes, r, _, _ := lateHighFor(t, 3, Config{NodeTimeout: 300 * time.Millisecond}, a)
	nodes[1].setDown(true)
	h, ok, err := r.Inspect(ctx, "k")
	if err != nil || !ok || h.Token != "a" {
		t.Fatalf("LOCKINFO with node 1 down: %+v %v %v, want a's hold", h, ok, err)
	}
	if h.Fence < 11 {
		t.Fatalf("LOCKINFO: fence %d, below a's grant's 11", h.Fence)
	}
	nodes[1].setDown(false)
	waitFor(t, "a's leases run out", func() bool { return holders(nodes, "k", "a") == 0 })
	setDelay(nodes[2], 50*time.Millisecond)                                // nodes 0 and 1 answer first
	r2 := New(asNodes(nodes), Config{NodeTimeout: 300 * time.Millisecond}) // another instance
	defer r2.Close()
	gb, err := r2.Acquire(ctx, "k", hold("b"))
	if err != nil {
		t.Fatal(err)
	}
	if gb.Fence <= h.Fence {
		t.Fatalf("b's grant after a's (LOCKINFO showed %d for a): fence %d", h.Fence, gb.Fence)
	}
}

// The same bare majority heard by a retry: the retry answers the largest,
// 51, and commits it, so that b's grant after a's release is above it,
// even where b's first majority is nodes 0 and 1.
func TestAttackRaiseBareMajorityRetryBelowNextGrant(t *testing.T) {
	ctx := context.Background()
	nodes, r, _, _ := lateHigh(t, 3, Config{NodeTimeout: 300 * time.Millisecond})
	nodes[1].setDown(true)
	g, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil || g.Fence != 51 {
		t.Fatalf("bare-majority retry: %+v %v, want the largest, 51", g, err)
	}
	if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release a: %v %v", ok, err)
	}
	nodes[1].setDown(false)
	setDelay(nodes[2], 50*time.Millisecond)
	r2 := New(asNodes(nodes), Config{NodeTimeout: 300 * time.Millisecond})
	defer r2.Close()
	gb, err := r2.Acquire(ctx, "k", hold("b"))
	if err != nil || gb.Fence <= g.Fence {
		t.Fatalf("b's grant after the retry's %d: %+v %v", g.Fence, gb, err)
	}
}

// With three and five nodes: a retry whose first majority disagrees
// (the late node answers early, another is slow) waits for the rest and
// answers the grant's 11; LOCKINFO, in the same state, shows 11; the late
// node keeps 51; a's release and b's grant give b a fence above 51 (its
// first majority includes a node whose counter the late take raised, or
// the commit of the retry did not lower it).
func TestAttackRaiseRetryAndLockInfoAnswerTheGrantsFence(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "three", 5: "five"}[n], func(t *testing.T) {
			ctx := context.Background()
			nodes, r, hang, late := lateHigh(t, n, Config{NodeTimeout: 3 * time.Second})
			close(hang)
			setDelay(nodes[late-1], 100*time.Millisecond) // the first majority heard includes the late node
			g, err := r.Acquire(ctx, "k", hold("a"))
			if err != nil || g.Fence != 11 {
				t.Fatalf("retry: %+v %v, want the grant's 11", g, err)
			}
			h, ok, err := r.Inspect(ctx, "k")
			if err != nil || !ok || h.Fence != 11 {
				t.Fatalf("LOCKINFO: %+v %v %v, want a with 11", h, ok, err)
			}
			if _, f, _ := entryOf(nodes[late], "k"); f != 51 {
				t.Fatalf("late node records %d, want the 51 it took the key with", f)
			}
			setDelay(nodes[late-1], 0)
			if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
				t.Fatalf("release a: %v %v", ok, err)
			}
			waitFor(t, "a's release everywhere", func() bool { return holders(nodes, "k", "a") == 0 })
			gb, err := r.Acquire(ctx, "k", hold("b"))
			if err != nil || gb.Fence <= 11 {
				t.Fatalf("b: %+v %v, want above 11", gb, err)
			}
		})
	}
}

// Two instances retry a's grant at once while the late node records 51 and
// node 2 is slow: both answer the grant's 11, and the late node keeps 51
// (neither retry's commit, nor the grant's settle once node 4 answers,
// lowers it).
func TestAttackRaiseTwoInstancesRetryAtOnce(t *testing.T) {
	nodes, r, hang, late := lateHigh(t, 5, Config{NodeTimeout: 3 * time.Second})
	setDelay(nodes[2], 100*time.Millisecond)
	r2 := New(asNodes(nodes), Config{NodeTimeout: 3 * time.Second})
	defer r2.Close()
	var wg sync.WaitGroup
	fences, errs := make([]int64, 2), make([]error, 2)
	for i, rl := range []*Redlock{r, r2} {
		wg.Go(func() {
			g, err := rl.Acquire(context.Background(), "k", hold("a"))
			fences[i], errs[i] = g.Fence, err
		})
	}
	wg.Wait()
	for i := range fences {
		if errs[i] != nil || fences[i] != 11 {
			t.Errorf("retry %d: fence %d %v, want the grant's 11", i, fences[i], errs[i])
		}
	}
	close(hang)
	waitFor(t, "node 4 takes part", func() bool { tok, _, _ := entryOf(nodes[4], "k"); return tok == "a" })
	waitFor(t, "the grant's settle", func() bool { return r.pending("k", "a") == (pendingAcquire{}) })
	for i := range nodes {
		// Nodes 0-2 record the grant's 11; the late node keeps its 51, and
		// node 4, whose calls landed in any order once it answered, may
		// have taken the key with a counter a retry's commit raised: none
		// is ever below 11.
		tok, f, _ := entryOf(nodes[i], "k")
		if tok != "a" || i < 3 && f != 11 || i == late && f != 51 || f < 11 {
			t.Errorf("node %d: %q fence %d, want a with 11 (node 3: 51; node 4: at least 11)", i, tok, f)
		}
	}
	if h, ok, err := r2.Inspect(context.Background(), "k"); err != nil || !ok || h.Fence != 11 {
		t.Errorf("LOCKINFO: %+v %v %v, want 11", h, ok, err)
	}
}

// The extra waits against a node that never answers (it hangs): a retry,
// and LOCKINFO, whose first majority disagrees end at the node timeout
// (they hear the hanging node's timeout and answer from what they heard),
// never refuse the held lock, and a retry cut short by the caller's
// deadline during the extra wait leaves the grant as it was (holders,
// fences, leases).
func TestAttackRaiseExtraWaitsAgainstAHangingNode(t *testing.T) {
	ctx := context.Background()
	nodes, r, hang, late := lateHigh(t, 5, Config{NodeTimeout: 3 * time.Second})
	defer close(hang) // node 4 hangs throughout
	hang2 := make(chan struct{})
	setHang(nodes[2], hang2)
	defer close(hang2)
	before := make([]time.Time, 4)
	for i := range before {
		before[i] = expiryOf(nodes[i], "k")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := r.Acquire(short, "k", hold("a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("retry cut short: %v, want the deadline's error", err)
	}
	time.Sleep(50 * time.Millisecond) // its rollback, in the background
	for i, want := range []int64{11, 11, 11, 51} {
		if tok, f, _ := entryOf(nodes[i], "k"); tok != "a" || f != want {
			t.Errorf("node %d after the failed retry: %q fence %d, want a with %d", i, tok, f, want)
		}
		if e := expiryOf(nodes[i], "k"); e.Before(before[i]) {
			t.Errorf("node %d: the failed retry shortened the lease", i)
		}
	}
	_ = late
	r2 := New(asNodes(nodes), Config{NodeTimeout: 300 * time.Millisecond})
	defer r2.Close()
	start := time.Now()
	h, ok, err := r2.Inspect(ctx, "k")
	if err != nil || !ok || h.Token != "a" || h.Fence < 11 {
		t.Fatalf("LOCKINFO with node 2 hanging: %+v %v %v, want a's hold", h, ok, err)
	}
	g, err := r2.Acquire(ctx, "k", hold("a"))
	if err != nil || g.Fence < 11 {
		t.Fatalf("retry with node 2 hanging: %+v %v, want a grant at or above 11", g, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("LOCKINFO and a retry took %v with a node timeout of 300 ms", d)
	}
	t.Logf("with node 2 hanging: LOCKINFO %d, retry %d", h.Fence, g.Fence)
}

func expiryOf(f *fakeNode, key string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.live(key); e != nil {
		return e.expires
	}
	return time.Time{}
}

// TestAttackRaiseRetryFirstMajorityWithAFreshTake: five nodes; a's grant is
// agreed on 11 by nodes 0-2 (counters 10), and its acquires to nodes 3
// (counter 50) and 4 (counter 0) are held on the grant's links; node 3's
// lands (51, kept). A retry through a second instance, whose first
// majority is nodes 0 (11), 3 (51) and 4, where the grant's acquire has
// not landed and the retry takes the free key (1): a majority answered
// yes, but only two of them held it for a. A majority of the nodes
// (0-2) records the grant's 11, and the retry must answer it; deciding on
// that first majority, it answers the largest counter, 51.
func TestAttackRaiseRetryFirstMajorityWithAFreshTake(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(5)
	for i := range 3 {
		nodes[i].counter["k"] = 10
	}
	nodes[3].counter["k"] = 50
	ns := asNodes(nodes)
	l3, l4 := newLink(nodes[3]), newLink(nodes[4])
	ns[3], ns[4] = l3, l4
	l3.hold(OpAcquire)
	l4.hold(OpAcquire)
	r := New(ns, Config{NodeTimeout: 3 * time.Second})
	defer r.Close()
	defer l4.let()
	g, err := r.Acquire(ctx, "k", hold("a"))
	if err != nil || g.Fence != 11 {
		t.Fatalf("grant: %+v %v, want 11", g, err)
	}
	l3.let()
	waitFor(t, "node 3's late take", func() bool { tok, f, _ := entryOf(nodes[3], "k"); return tok == "a" && f == 51 })
	setDelay(nodes[1], 50*time.Millisecond)
	setDelay(nodes[2], 100*time.Millisecond)
	r2 := New(asNodes(nodes), Config{NodeTimeout: 3 * time.Second})
	defer r2.Close()
	again, err := r2.Acquire(ctx, "k", hold("a"))
	if err != nil || again.Fence != g.Fence {
		t.Fatalf("retry: %+v %v, want the grant's %d", again, err, g.Fence)
	}
	l4.let()
	waitFor(t, "the grant's settle", func() bool { return r.pending("k", "a") == (pendingAcquire{}) })
	if h, ok, err := r2.Inspect(ctx, "k"); err != nil || !ok || h.Fence != g.Fence {
		t.Fatalf("LOCKINFO: %+v %v %v, want %d", h, ok, err, g.Fence)
	}
}
