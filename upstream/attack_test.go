package upstream

import (
	"errors"
	"sync"
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
	jumper, clock := clockshim.StartRedis(t, durable)
	others := redistest.StartN(t, 2, durable)
	servers := []*redistest.Server{jumper, others[0], others[1]}
	gated := &gatedNode{pending: make(chan *quorum.Op, 8), gate: make(chan struct{}), landed: make(chan quorum.Reply, 8)}
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	gated.Node = nodes[0]
	nodes[0] = gated
	r := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond, OnLost: onLost})
	t.Cleanup(func() { r.Close() })
	t.Cleanup(func() { close(gated.gate) }) // first: a heal still held lands, so Close returns
	waitCounted(t, r, 30*time.Second, true, true, true)
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
// Redis drops a's key there. An instance started after the step takes the
// stepped clock as its baseline; it must not grant k to b while a's
// validity runs.
//
// It does: instance B's first reply from node 0 is its baseline, the
// restart rule sees nothing (same run id, uptime only grew), so B counts
// node 0 at once and grants k to b on nodes 0 and 2 about 10 ms into a's
// 4.95 s validity (a's fence 1, b's 2), while instance A, idle, has not
// yet seen the jump and has told a nothing. Holding it needs a baseline a
// new instance does not have (persisted offsets, or holding every node
// out for MaxLease at start); not a small change.
func TestAttackNewInstanceAfterJump(t *testing.T) {
	t.Skip("known: an instance started after a node's clock jump takes the jumped clock as its baseline and grants a lock another instance's holder still holds on a bare majority including that node (see the comment)")
	const lease = 5 * time.Second
	var mu sync.Mutex
	var lost []string
	servers, clock, _, rA := attackNodes(t, lease, func(key, token, reason string) {
		mu.Lock()
		defer mu.Unlock()
		lost = append(lost, key+" "+token+" "+reason)
	})
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
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	rB := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond})
	t.Cleanup(func() { rB.Close() })
	waitCounted(t, rB, 30*time.Second, true, true, true)
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
