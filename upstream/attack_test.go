package upstream

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Constructed interleavings against the trial branch's lock path (one
// counter per node, healing, the clock-jump rule), on real redis-servers:
// each test drives one sequence step by step, holding a heal back where
// the sequence needs it (gatedNode, heal_test.go).

// attackNodes starts three durable servers (counted at once by the restart
// rule), node 0 under a clock shim, and a Redlock whose node 0 holds its
// heals back until the test lets them go.
func attackNodes(t *testing.T, lease time.Duration, onLost func(key, token, reason string)) ([]*redistest.Server, *clockshim.Clock, *gatedNode, *quorum.Redlock) {
	t.Helper()
	durable := redistest.Options{AppendFsyncAlways: true}
	up := time.Now()
	jumper, clock := clockshim.StartRedis(t, durable)
	others := redistest.StartN(t, 2, durable)
	servers := []*redistest.Server{jumper, others[0], others[1]}
	gated, r := gatedRedlock(t, servers, 0, quorum.OpHeal, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond, OnLost: onLost})
	t.Cleanup(func() { close(gated.gate) }) // first: a heal still held lands, so Close returns
	waitCounted(t, r, 30*time.Second, true, true, true)
	// Nodes first seen, durable or not, are healed only by a renewal that
	// starts the meta grace after their start (quorum's healsFrom): the
	// tests heal from their first renewal.
	time.Sleep(time.Until(up.Add(2*quorum.MaxNodeTimeout + 1500*time.Millisecond)))
	return servers, clock, gated, r
}

// TestAttackHealAfterReleaseClockBack: a holds k on nodes 1 and 2 (node 0
// lost it); a renewal finds k free on node 0 and decides a heal, which the
// network holds. Node 0's clock steps back 2 s; a releases k, which
// reaches node 0 and marks the key there, by node 0's (stepped) clock;
// then the heal lands. The release must not be undone: node 0 must not
// hold k for a afterwards.
func TestAttackHealAfterReleaseClockBack(t *testing.T) {
	const lease = 5 * time.Second
	servers, clock, gated, r := attackNodes(t, lease, nil)
	ctx := testCtx(t)
	raw := rawClient(t, servers[0].Addr())
	if _, err := r.Acquire(ctx, "k", hold("a", lease)); err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	if err := raw.Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Extend(ctx, "k", "a", 0, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gated.pending:
	case <-time.After(testTimeout):
		t.Fatal("no heal of k sent to node 0")
	}
	// Load release.lua on node 0 first: a batch that shows the jump is
	// answered with it before any NOSCRIPT is resent, and the release
	// below must run there.
	if _, err := r.Release(ctx, "warm", "z", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := clock.Step(-2 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
	if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	eventually(t, testTimeout, "the release reached node 0", func() bool {
		n, err := raw.Exists(ctx, DefaultPrefix+"released:k").Result()
		return err == nil && n == 1
	})
	gated.gate <- struct{}{}
	rep := <-gated.landed
	v, err := raw.Get(ctx, "k").Result()
	pttl, _ := raw.PTTL(ctx, "k").Result()
	if err == nil {
		t.Fatalf("node 0 holds k for %q (PTTL %v) after a's release: the heal (reply TTL %v, err %v) undid it", v, pttl, rep.TTL, rep.Err)
	}
}

// TestAttackNewInstanceAfterJump: a holds k on nodes 0 and 1 only (node 2
// missed the grant). Node 0's clock steps forward past the lease, so
// Redis drops a's key there. An instance started after the step has no
// earlier reply of node 0 to see the jump by; it must not grant k to b
// while a's validity runs.
//
// Before its first reply was checked against the instance's own clock
// (RedisOptions.ClockSkew), it did: instance B took that reply as its
// baseline, the restart rule saw nothing (same run id, uptime only grew),
// so B counted node 0 at once and granted k to b on nodes 0 and 2 about
// 10 ms into a's 4.95 s validity (a's fence 1, b's 2), while instance A,
// idle, had not yet seen the jump and had told a nothing. Now node 0's
// first reply, 10 s off B's clock, is a jump: B holds node 0 out for the
// longest lease, as A does once it sees the jump.
func TestAttackNewInstanceAfterJump(t *testing.T) {
	const lease = 5 * time.Second
	var mu sync.Mutex
	var lost []string
	servers, clock, _, rA := attackNodes(t, lease, func(key, token, reason string) {
		mu.Lock()
		defer mu.Unlock()
		lost = append(lost, key+" "+token+" "+reason)
	})
	ctx := testCtx(t)
	nodes, g, start := jumpedAfterGrant(t, servers, clock, rA, lease)
	rB := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond})
	t.Cleanup(func() { rB.Close() })
	waitCounted(t, rB, 30*time.Second, false, true, true)
	if c := nodes[0].(*RedisNode).Clock(); c.Jumps != 1 || c.Last < 9*time.Second {
		t.Errorf("node 0's clock as B sees it: %v; want the +10s step counted as a jump", c)
	}
	gb, err := rB.Acquire(ctx, "k", hold("b", lease))
	if err == nil && time.Since(start) < g.Validity {
		mu.Lock()
		told := lost
		mu.Unlock()
		t.Fatalf("instance B granted k to b (fence %d) %v into a's validity %v (a's fence %d); a told %q",
			gb.Fence, time.Since(start), g.Validity, g.Fence, told)
	}
	if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("b: %v", err)
	}
}

// TestAttackHealClockBackCapped: a renewal finds k free on node 0 and
// decides a heal; node 0's clock steps back 2 s before the heal lands. The
// healed key's TTL must not exceed the validity the holder was told (before
// heal.lua capped it at HealUntil - FreeAt, it was that plus the 2 s).
func TestAttackHealClockBackCapped(t *testing.T) {
	const lease = 5 * time.Second
	servers, clock, gated, r := attackNodes(t, lease, nil)
	ctx := testCtx(t)
	raw := rawClient(t, servers[0].Addr())
	// renew takes key for a, deletes it on node 0 and renews it: node 0's
	// heal is held.
	renew := func(key string) time.Duration {
		t.Helper()
		if _, err := r.Acquire(ctx, key, hold("a", lease)); err != nil {
			t.Fatal(err)
		}
		if err := raw.Del(ctx, key, DefaultPrefix+"meta:"+key).Err(); err != nil {
			t.Fatal(err)
		}
		v, err := r.Extend(ctx, key, "a", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-gated.pending:
		case <-time.After(testTimeout):
			t.Fatalf("no heal of %s sent to node 0", key)
		}
		return v
	}
	// A first heal loads heal.lua on node 0: a batch that shows the jump
	// is answered with it before any NOSCRIPT is resent.
	renew("warm")
	gated.gate <- struct{}{}
	if rep := <-gated.landed; rep.Err != nil || rep.TTL <= 0 {
		t.Fatalf("first heal: %v %v", rep.TTL, rep.Err)
	}
	v := renew("k")
	told := time.Now()
	if _, err := clock.Step(-2 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	gated.gate <- struct{}{}
	rep := <-gated.landed
	pttl, err := raw.PTTL(ctx, "k").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The bound a stepped clock leaves: the validity told, counted from
	// the moment the node found the key free (the heal cannot know how
	// long ago that was), but for a millisecond of the node's clock.
	if pttl > v+2*time.Millisecond {
		t.Fatalf("healed key's PTTL %v (heal reply %v %v), past the validity told %v (%v ago)", pttl, rep.TTL, rep.Err, v, time.Since(told))
	}
}

// TestAttackJumpBetweenAcquireAndCommit: the nodes' counters disagree
// (node 0 at 100, node 1 at 50), so a's grant of k needs the commit round.
// Its acquire takes k on every node; node 0's commit is held while node
// 0's clock steps forward 10 s (Redis drops a's key there) and then lands.
// The grant rests on nodes 1 and 2 with fence 101 (or 51, when node 0's
// acquire answered after the two others); b is refused while a holds k,
// the holder is not told it lost a lock a majority still holds, and the
// grant after a's release counts above a's fence.
func TestAttackJumpBetweenAcquireAndCommit(t *testing.T) {
	const lease = 5 * time.Second
	durable := redistest.Options{AppendFsyncAlways: true}
	jumper, clock := clockshim.StartRedis(t, durable)
	others := redistest.StartN(t, 2, durable)
	servers := []*redistest.Server{jumper, others[0], others[1]}
	g0 := newGate(quorum.OpCommit, "")
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	g0.Node = nodes[0]
	nodes[0] = g0
	var mu sync.Mutex
	var lost []string
	r := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond,
		OnLost: func(key, token, reason string) {
			mu.Lock()
			defer mu.Unlock()
			lost = append(lost, key+" "+token+" "+reason)
		}})
	t.Cleanup(func() { r.Close() })
	t.Cleanup(func() { close(g0.gate) })
	waitCounted(t, r, 30*time.Second, true, true, true)
	ctx := testCtx(t)
	// Settle layout 2 and load the scripts on every node.
	if _, err := r.Acquire(ctx, "w", hold("z", lease)); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Release(ctx, "w", "z", nil, nil); !ok || err != nil {
		t.Fatalf("release w: %v %v", ok, err)
	}
	for i, c := range []int64{100, 50} {
		if err := rawClient(t, servers[i].Addr()).Set(ctx, DefaultPrefix+"layout", c, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	type res struct {
		g   engine.Grant
		err error
	}
	got := make(chan res, 1)
	go func() {
		g, err := r.Acquire(ctx, "k", hold("a", lease))
		got <- res{g, err}
	}()
	select {
	case <-g0.pending:
	case <-time.After(testTimeout):
		t.Fatal("no commit of k sent to node 0")
	}
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	a := <-got
	if a.err != nil {
		t.Fatalf("a: %v", a.err)
	}
	// The largest counter among the answers that decided: 101 with node
	// 0's among them, else 51.
	if a.g.Fence != 101 && a.g.Fence != 51 {
		t.Fatalf("a's fence %d, want 101 or 51", a.g.Fence)
	}
	g0.gate <- struct{}{}
	rep := <-g0.landed
	t.Logf("node 0's commit, landing after the step: ok %v err %v", rep.OK, rep.Err)
	if _, err := r.Acquire(ctx, "k", hold("b", lease)); !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("b while a holds k on nodes 1 and 2: %v", err)
	}
	mu.Lock()
	if len(lost) > 0 {
		t.Errorf("holder told %q, though nodes 1 and 2 hold its lock", lost)
	}
	mu.Unlock()
	if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	waitCounted(t, r, 30*time.Second, true, true, true) // node 0's clock hold-out ends
	gc, err := r.Acquire(ctx, "k", hold("c", lease))
	if err != nil || gc.Fence <= a.g.Fence {
		t.Fatalf("c after a: %+v %v (a's fence %d)", gc, err, a.g.Fence)
	}
}

// TestAttackJumpSeenByLateReply: a holds k on nodes 0 and 1 only (node 2
// lost it). A grant of another key, w, is decided by nodes 1 and 2 while
// node 0's acquire is held; node 0's clock steps forward 10 s (Redis drops
// a's key there), and then node 0's acquire lands: its pipeline is the
// first to show the jump, after the grant was decided. The jump must still hold node 0 out, and b must
// be refused k while a's validity runs. (Whether a is told depends on
// whether node 2's acquire was among the first two answers: not checked.)
func TestAttackJumpSeenByLateReply(t *testing.T) {
	const lease = 5 * time.Second
	durable := redistest.Options{AppendFsyncAlways: true}
	jumper, clock := clockshim.StartRedis(t, durable)
	others := redistest.StartN(t, 2, durable)
	servers := []*redistest.Server{jumper, others[0], others[1]}
	g0 := newGate(quorum.OpAcquire, "w")
	// Every answer of a node is noted, as the instance does
	// (instance/nodes.go, record): the fan-out reads only those that come
	// before its outcome.
	var rp atomic.Pointer[quorum.Redlock]
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr(), Observe: func(_ time.Duration, err error) {
			if r := rp.Load(); r != nil && errors.Is(err, quorum.ErrClockJumped) {
				go r.NoteClock(i, err)
			}
		}})
	}
	g0.Node = nodes[0]
	nodes[0] = g0
	var mu sync.Mutex
	var lost []string
	r := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond,
		OnLost: func(key, token, reason string) {
			mu.Lock()
			defer mu.Unlock()
			lost = append(lost, key+" "+token+" "+reason)
		}})
	rp.Store(r)
	t.Cleanup(func() { r.Close() })
	t.Cleanup(func() { close(g0.gate) })
	waitCounted(t, r, 30*time.Second, true, true, true)
	ctx := testCtx(t)
	start := time.Now()
	g, err := r.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	// Node 2 lost a's key (as if it had missed the grant).
	if err := rawClient(t, servers[2].Addr()).Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
		t.Fatal(err)
	}
	// Granted by nodes 1 and 2 while node 0's acquire is held.
	if _, err := r.Acquire(ctx, "w", hold("z", lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g0.pending:
	case <-time.After(testTimeout):
		t.Fatal("no acquire of w sent to node 0")
	}
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	g0.gate <- struct{}{}
	rep := <-g0.landed
	if !errors.Is(rep.Err, quorum.ErrClockJumped) {
		t.Skipf("node 0's late acquire did not carry the jump (%v): the probe saw it first", rep.Err)
	}
	time.Sleep(300 * time.Millisecond) // probes and any note of the jump
	gb, err := r.Acquire(ctx, "k", hold("b", lease))
	mu.Lock()
	told := lost
	mu.Unlock()
	if err == nil && time.Since(start) < g.Validity {
		t.Fatalf("b granted k (fence %d) %v into a's validity %v (a's fence %d); held out %+v; a told %q",
			gb.Fence, time.Since(start), g.Validity, g.Fence, r.HeldOut(), told)
	}
	if h := r.HeldOut(); len(h) != 1 || h[0].Node != 0 || !h[0].Clock {
		t.Fatalf("held out after node 0's jump: %+v", h)
	}
}

// TestAttackHealOntoNodeThatRestartsEmpty: a renewal finds k free on node
// 0 and decides a heal, which is held; node 0 then restarts without its
// data, and the heal lands on the empty node. The heal raises the empty
// node's counter to a's fence; the restart rule still holds the node out
// until its hold-out ends and its floor is raised; and once a has
// released k, the next grant counts above a's fence.
func TestAttackHealOntoNodeThatRestartsEmpty(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	const lease = 1500 * time.Millisecond
	// A node timeout of the whole lease, not the automatic 250 ms: node
	// 0's answer to the renewal must count for the heal to be decided, and
	// a loaded machine (the suite twice at once) made it miss 250 ms once.
	gated, r := gatedRedlock(t, servers, 0, quorum.OpHeal, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond, NodeTimeout: lease})
	t.Cleanup(func() { close(gated.gate) })
	waitCounted(t, r, 30*time.Second, true, true, true)
	ctx := healCtx(t)
	// Other keys' grants raise the counters first, so that the empty node's
	// counter matters.
	for i := range 5 {
		key := fmt.Sprintf("o%d", i)
		if _, err := r.Acquire(ctx, key, hold("z", lease)); err != nil {
			t.Fatal(err)
		}
	}
	g, err := r.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, servers[0].Addr())
	if err := raw.Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
		t.Fatal(err)
	}
	// Node 0, first seen without verified fsync, is healed only from the
	// meta grace after its start (quorum's healsFrom): renew until the heal
	// is sent.
	sent := false
	for end := time.Now().Add(30 * time.Second); !sent && time.Now().Before(end); {
		if _, err := r.Extend(ctx, "k", "a", 0, ""); err != nil {
			t.Fatal(err)
		}
		select {
		case <-gated.pending:
			sent = true
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !sent {
		t.Fatal("no heal of k sent to node 0")
	}
	restartEmpty(t, servers[0])
	gated.gate <- struct{}{}
	rep := <-gated.landed
	c, err := nodeCounter(ctx, rawClient(t, servers[0].Addr()))
	t.Logf("heal on the restarted node: TTL %v err %v; its counter %d %v; a's fence %d", rep.TTL, rep.Err, c, err, g.Fence)
	if rep.Err == nil && rep.TTL > 0 && c < g.Fence {
		t.Fatalf("healed node's counter %d below the fence %d", c, g.Fence)
	}
	waitCounted(t, r, 10*time.Second, false, true, true) // the restart rule sees the restart
	if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	waitCounted(t, r, 30*time.Second, true, true, true)
	// b must count above a on every majority, node 0's too.
	for i := range 3 {
		gb, err := r.Acquire(ctx, "k", hold(fmt.Sprintf("b%d", i), lease))
		if err != nil {
			t.Fatal(err)
		}
		if gb.Fence <= g.Fence {
			t.Fatalf("grant %d after a: fence %d, a's %d", i, gb.Fence, g.Fence)
		}
		g = gb
		if ok, err := r.Release(ctx, "k", gb.Token, nil, nil); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
}

// TestAttackSkewRestartRuleOff: TestAttackNewInstanceAfterJump with the
// restart rule off on instance B (MaxLease 0). Node 0's first reply to B,
// 10 s off B's clock, is a First jump; B's hold is then the longest lease
// B granted so far, which for a new instance is none: the hold is the
// drift allowance alone (2 ms), and B's next acquire counts node 0 and
// grants k to b while a's validity runs.
func TestAttackSkewRestartRuleOff(t *testing.T) {
	const lease = 5 * time.Second
	servers, clock, _, rA := attackNodes(t, lease, nil)
	ctx := testCtx(t)
	nodes, g, start := jumpedAfterGrant(t, servers, clock, rA, lease)
	rB := quorum.New(nodes, quorum.Config{})
	t.Cleanup(func() { rB.Close() })
	for i := 0; i < 3; i++ {
		gb, err := rB.Acquire(ctx, "k", hold("b", lease))
		if err == nil && time.Since(start) < g.Validity {
			t.Fatalf("attempt %d: instance B (restart rule off) granted k to b (fence %d) %v into a's validity %v (a's fence %d); node 0's clock %v",
				i, gb.Fence, time.Since(start), g.Validity, g.Fence, nodes[0].(*RedisNode).Clock())
		}
		if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			t.Fatalf("b: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := nodes[0].(*RedisNode).Clock(); c.Jumps != 1 {
		t.Errorf("node 0's clock as B sees it: %v; want the +10s step counted as a jump", c)
	}
}

// jumpedAfterGrant grants k to a through rA on nodes 0 and 1 only (node 2's
// copy deleted), steps node 0's clock 10 s forward (Redis drops a's key
// there) and returns a new instance's nodes over servers, which meet node
// 0's stepped clock first (ClockSkew 1 s), with a's grant and when it began.
func jumpedAfterGrant(t *testing.T, servers []*redistest.Server, clock *clockshim.Clock, rA *quorum.Redlock, lease time.Duration) ([]quorum.Node, engine.Grant, time.Time) {
	t.Helper()
	ctx := testCtx(t)
	start := time.Now()
	g, err := rA.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	if err := rawClient(t, servers[2].Addr()).Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr(), ClockSkew: time.Second})
	}
	return nodes, g, start
}
