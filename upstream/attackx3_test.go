package upstream

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on the heal's wait after a node lost its metas (quorum's
// healsFrom), on real nodes.

// TestAttackX3FirstSeenDurableAfterAnEmptyRestart: a's release through C
// (node_timeout_ms 5000, link to node 1 cut) deletes a on node 2 and is
// held on its way to node 0; node 2 restarts empty, A (max_lease_ms 1000)
// counts it again once its hold-out is over and vets the process, and the
// operator makes it durable (CONFIG SET appendonly yes, appendfsync
// always). Instance B, started then, first sees node 2 durable and vetted
// and counts it at once; its renewals of a, within the grace of node 2's
// start, must not heal node 2 while the release is on its way to node 0.
// Seen failing before quorum took a start for a node first seen durable:
// node 2 held a again after the release was decided, LOCKINFO showed a.
func TestAttackX3FirstSeenDurableAfterAnEmptyRestart(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const lease = time.Second
	rel := newGate(quorum.OpRelease, "k")
	var nodesA, nodesB, nodesC []quorum.Node
	for i, s := range servers {
		nodesA = append(nodesA, newNode(t, RedisOptions{Addr: s.Addr()}))
		nodesB = append(nodesB, newNode(t, RedisOptions{Addr: s.Addr()}))
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
	cfgC := cfg
	cfgC.NodeTimeout = 5 * time.Second
	rC := quorum.New(nodesC, cfgC)
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
	restartEmpty(t, servers[2])
	renew := func(r *quorum.Redlock, until time.Duration, done func() bool) {
		for time.Since(sent) < until && (done == nil || !done()) {
			if _, err := r.Extend(ctx, "k", "a", lease, ""); err != nil {
				t.Fatalf("a's renewal, %v after the release was sent: %v", time.Since(sent), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	renew(rA, 3*time.Second, func() bool { return !rA.Counted()[2] })
	renew(rA, 3*time.Second, func() bool { return rA.Counted()[2] })
	if !rA.Counted()[2] {
		t.Fatalf("A does not count node 2 again %v after the release was sent (max_lease_ms 1000)", time.Since(sent))
	}
	raw2 := rawClient(t, servers[2].Addr())
	for _, kv := range [][2]string{{"appendonly", "yes"}, {"appendfsync", "always"}} {
		if err := raw2.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rB := quorum.New(nodesB, cfg)
	t.Cleanup(func() { rB.Close() })
	if c := rB.Counted(); !c[0] || !c[1] || !c[2] {
		t.Fatalf("B, first seeing node 2 durable and vetted, counts %v, want every node", c)
	}
	renew(rB, 4*time.Second, nil)
	if time.Since(sent) > 4500*time.Millisecond {
		t.Fatalf("the scene took %v: the release would time out on node 0 (a loaded host?)", time.Since(sent))
	}
	rel.gate <- struct{}{}
	if err := <-released; err != nil {
		t.Fatalf("a's release through C, decided by nodes 0 and 2 (%v after it was sent): %v", time.Since(sent), err)
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if v := raw2.Get(ctx, "k").Val(); v == "a" {
			t.Errorf("node 2, restarted empty after a's release there, holds a again (healed through B)")
			break
		}
	}
	if h, ok, err := rB.Inspect(ctx, "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release: a holds it with fence %d", h.Fence)
	}
}

// TestAttackX3ClockStepDropsTheReleasesMeta: node 0 runs with
// appendfsync always under a clock shim. a's release through C
// (node_timeout_ms 5000, link to node 1 cut) deletes a on node 0, leaving
// its blank meta, and is held on its way to node 2; node 0's clock steps
// an hour forward, which ends that meta (Redis expires by its wall clock).
// A (max_lease_ms 1000) holds node 0 out for 1 s, then counts it again
// while the release is on its way to node 2, and its renewals of a find
// node 0 free with no meta. Seen failing before quorum waited the meta
// grace after a step forward: node 0 held a again after the release was
// decided, and LOCKINFO showed a. The node is durable: its restart start
// cannot cover this.
func TestAttackX3ClockStepDropsTheReleasesMeta(t *testing.T) {
	durable := redistest.Options{AppendFsyncAlways: true}
	jumper, clock := clockshim.StartRedis(t, durable)
	servers := append([]*redistest.Server{jumper}, redistest.StartN(t, 2, durable)...)
	up := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const lease = time.Second
	rel := newGate(quorum.OpRelease, "k")
	var nodesA, nodesC []quorum.Node
	for i, s := range servers {
		nodesA = append(nodesA, newNode(t, RedisOptions{Addr: s.Addr()}))
		var n quorum.Node = newNode(t, RedisOptions{Addr: s.Addr()})
		switch i {
		case 1:
			n = cutNode{n}
		case 2:
			rel.Node = n
			n = rel
		}
		nodesC = append(nodesC, n)
	}
	cfg := quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond}
	rA := quorum.New(nodesA, cfg)
	t.Cleanup(func() { rA.Close() })
	cfg.NodeTimeout = 5 * time.Second
	rC := quorum.New(nodesC, cfg)
	t.Cleanup(func() { rC.Close() })
	waitCounted(t, rA, 30*time.Second, true, true, true)
	eventually(t, 30*time.Second, "C counts nodes 0 and 2", func() bool {
		c := rC.Counted()
		return c[0] && c[2]
	})
	// The servers, first seen, are healed only from the grace after their
	// start (6 s covers it): past it, only the step forward holds heals back.
	time.Sleep(time.Until(up.Add(6 * time.Second)))
	if _, err := rA.Acquire(ctx, "k", hold("a", lease)); err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	sent, released := releaseHeldUp(t, rC, rel, servers[0].Addr(), "node 2")
	raw0 := rawClient(t, servers[0].Addr())
	if _, err := clock.Step(time.Hour); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
	if n := raw0.Exists(ctx, DefaultPrefix+"meta:k").Val(); n != 0 {
		t.Fatalf("node 0's blank meta still there after its clock stepped an hour forward")
	}
	renew := func(until time.Duration, done func() bool) {
		for time.Since(sent) < until && (done == nil || !done()) {
			if _, err := rA.Extend(ctx, "k", "a", lease, ""); err != nil {
				t.Fatalf("a's renewal, %v after the release was sent: %v", time.Since(sent), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	renew(3*time.Second, func() bool { return !rA.Counted()[0] })
	if rA.Counted()[0] {
		t.Fatal("A does not hold node 0 out after its clock stepped an hour forward")
	}
	renew(3500*time.Millisecond, nil)
	if !rA.Counted()[0] {
		t.Fatalf("A still holds node 0 out %v after the release was sent (max_lease_ms 1000)", time.Since(sent))
	}
	if time.Since(sent) > 4500*time.Millisecond {
		t.Fatalf("the scene took %v: the release would time out on node 2 (a loaded host?)", time.Since(sent))
	}
	rel.gate <- struct{}{}
	if err := <-released; err != nil {
		t.Fatalf("a's release through C, decided by nodes 0 and 2 (%v after it was sent): %v", time.Since(sent), err)
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if v := raw0.Get(ctx, "k").Val(); v == "a" {
			t.Errorf("node 0, its clock stepped forward after a's release there, holds a again")
			break
		}
	}
	if h, ok, err := rA.Inspect(ctx, "k"); err == nil && ok && h.Token == "a" {
		t.Errorf("LOCKINFO after a's release: a holds it with fence %d", h.Fence)
	}
}
