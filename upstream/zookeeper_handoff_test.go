package upstream

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// waiterFor is a waiter's hold whose Waiter says which lock it wants, as
// the engine's does.
func waiterFor(token string, ttl time.Duration) engine.Hold {
	h := waitHold(token, ttl)
	h.Waiter.TTL, h.Waiter.Mode, h.Waiter.Name = h.TTL, h.Mode, h.Name
	return h
}

// TestZooKeeperHandoff: a release through the instance whose waiter stands
// just behind the lock hands it the key in the same multi; the waiter
// takes it without writing its place again, with the place's czxid as its
// fence, and the lock then behaves as any other.
func TestZooKeeperHandoff(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, ZKOptions{})
	raw := rawZK(t, srv.Addr())
	ctx, key := testCtx(t), "handoff"
	first := mustGrant(t, z, key, hold("a", time.Minute))
	b := waiterFor("b", 20*time.Second)
	mustBusy(t, z, key, b)

	ok, err := z.ReleaseThen(ctx, key, "a", "b", nil)
	if !ok || err != nil {
		t.Fatalf("release with a handoff: %v %v", ok, err)
	}
	nodes := lockNodes(t, raw, key)
	if len(nodes) != 1 {
		t.Fatalf("nodes after the handoff: %v, want b's place only", nodes)
	}
	p := DefaultZKRoot + "/" + encodeKey(key) + "/" + nodes[0]
	if _, stat, err := raw.Get(p); err != nil || stat.Version != 1 {
		t.Fatalf("b's place right after the release: %+v %v; want it written (version 1) in the release's multi", stat, err)
	}
	g := mustGrant(t, z, key, b)
	_, stat, err := raw.Get(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence != stat.Czxid || g.Fence <= first.Fence || stat.Version != 1 {
		t.Fatalf("taken: fence %d (first %d), place czxid %d version %d; want the czxid, version 1 (no second write)",
			g.Fence, first.Fence, stat.Czxid, stat.Version)
	}
	if g.Validity <= 0 || g.Validity > 20*time.Second {
		t.Fatalf("validity %v", g.Validity)
	}
	if h, held, err := z.Inspect(ctx, key); !held || err != nil || h.Token != "b" || h.Fence != g.Fence || h.Mode != engine.Lease {
		t.Fatalf("inspect: %+v %v %v", h, held, err)
	}
	zkRelease(t, z, key, "b", true)
	if n := lockNodes(t, raw, key); len(n) != 0 {
		t.Fatalf("nodes after b's release: %v", n)
	}
}

// TestZooKeeperHandoffNotTaken: a waiter that leaves before taking the key
// handed to it releases it, and the key is free to take.
func TestZooKeeperHandoffNotTaken(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, ZKOptions{})
	raw := rawZK(t, srv.Addr())
	ctx, key := testCtx(t), "handoff-left"
	mustGrant(t, z, key, hold("a", time.Minute))
	mustBusy(t, z, key, waiterFor("b", time.Minute))
	if ok, err := z.ReleaseThen(ctx, key, "a", "b", nil); !ok || err != nil {
		t.Fatalf("release with a handoff: %v %v", ok, err)
	}
	if err := z.Leave(ctx, key, "b"); err != nil {
		t.Fatal(err)
	}
	if n := lockNodes(t, raw, key); len(n) != 0 {
		t.Fatalf("nodes after b left: %v", n)
	}
	mustGrant(t, z, key, hold("c", time.Minute))
}

// TestZooKeeperNoHandoffPastAnotherWaiter: a place that is not just behind
// the lock — another instance's waiter stands between — gets no handoff:
// the release is a plain one and the other waiter goes first.
func TestZooKeeperNoHandoffPastAnotherWaiter(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, ZKOptions{})
	other := newZK(t, []string{srv.Addr()}, ZKOptions{})
	ctx, key := testCtx(t), "handoff-order"
	mustGrant(t, z, key, hold("a", time.Minute))
	mustBusy(t, other, key, waiterFor("o", time.Minute))
	mustBusy(t, z, key, waiterFor("b", time.Minute))
	if ok, err := z.ReleaseThen(ctx, key, "a", "b", nil); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	var busy *engine.BusyError
	if _, err := z.Acquire(ctx, key, waiterFor("b", time.Minute)); !errors.As(err, &busy) {
		t.Fatalf("b, behind o: %v, want refused", err)
	}
	mustGrant(t, other, key, waiterFor("o", time.Minute))
}
