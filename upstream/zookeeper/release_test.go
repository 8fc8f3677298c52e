package zookeeper

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

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
// fence, and the lock then behaves as any other. A lease replaces the
// place by its promoted node, persistent, at the same sequence; a
// connection-bound lock is written into the place.
func TestZooKeeperHandoff(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	ctx, key := testCtx(t), "handoff"
	first := mustGrant(t, z, key, hold("a", time.Minute))
	b := waiterFor("b", 20*time.Second)
	mustBusy(t, z, key, b)

	placeBefore, placeStat := place(t, raw, key, "b")
	ok, err := z.Release(ctx, key, "a", []engine.Waiter{{ID: "b"}}, nil)
	if !ok || err != nil {
		t.Fatalf("release with a handoff: %v %v", ok, err)
	}
	nodes := lockNodes(t, raw, key)
	if len(nodes) != 1 {
		t.Fatalf("nodes after the handoff: %v, want b's place only", nodes)
	}
	p := DefaultRoot + "/" + encodeKey(key) + "/" + nodes[0]
	if p != promoted(placeBefore) {
		t.Fatalf("b's lease %s, want %s in place of %s", p, promoted(placeBefore), placeBefore)
	}
	if _, stat, err := raw.Get(p); err != nil || stat.Version != 0 || stat.EphemeralOwner != 0 {
		t.Fatalf("b's lease right after the release: %+v %v; want it made persistent in the release's multi", stat, err)
	}
	g := mustGrant(t, z, key, b)
	_, stat, err := raw.Get(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence != placeStat.Czxid || g.Fence <= first.Fence || stat.Version != 0 {
		t.Fatalf("taken: fence %d (first %d), place czxid %d, lease version %d; want the place's czxid, version 0 (no second write)",
			g.Fence, first.Fence, placeStat.Czxid, stat.Version)
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
	z := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	ctx, key := testCtx(t), "handoff-left"
	mustGrant(t, z, key, hold("a", time.Minute))
	mustBusy(t, z, key, waiterFor("b", time.Minute))
	if ok, err := z.Release(ctx, key, "a", []engine.Waiter{{ID: "b"}}, nil); !ok || err != nil {
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
	z := newZK(t, []string{srv.Addr()}, Options{})
	other := newZK(t, []string{srv.Addr()}, Options{})
	ctx, key := testCtx(t), "handoff-order"
	mustGrant(t, z, key, hold("a", time.Minute))
	mustBusy(t, other, key, waiterFor("o", time.Minute))
	mustBusy(t, z, key, waiterFor("b", time.Minute))
	if ok, err := z.Release(ctx, key, "a", []engine.Waiter{{ID: "b"}}, nil); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	var busy *engine.BusyError
	if _, err := z.Acquire(ctx, key, waiterFor("b", time.Minute)); !errors.As(err, &busy) {
		t.Fatalf("b, behind o: %v, want refused", err)
	}
	mustGrant(t, other, key, waiterFor("o", time.Minute))
}

// releaseThen releases token's lock through z with line, the holds of
// z's first waiters, as the engine does; the release must succeed.
func releaseThen(t *testing.T, z *ZooKeeper, key, token string, line ...engine.Hold) {
	t.Helper()
	var waiters []engine.Waiter
	for _, h := range line {
		waiters = append(waiters, *h.Waiter)
	}
	if ok, err := z.Release(testCtx(t), key, token, waiters, nil); !ok || err != nil {
		t.Fatalf("release of %s: %v %v", token, ok, err)
	}
}

// place is the node of waiter id's place among key's nodes, and its stat.
// A place that became a lease is replaced by its promoted node, at the
// same sequence.
func place(t *testing.T, raw *zk.Conn, key, id string) (string, *zk.Stat) {
	t.Helper()
	for _, name := range lockNodes(t, raw, key) {
		if strings.HasPrefix(name, placePrefix(id)) || strings.HasPrefix(name, tokenID(id)+"-"+string(kindLease)) {
			p := DefaultRoot + "/" + encodeKey(key) + "/" + name
			_, stat, err := raw.Get(p)
			if err != nil {
				t.Fatal(err)
			}
			return p, stat
		}
	}
	t.Fatalf("no place of %s among %v", id, lockNodes(t, raw, key))
	return "", nil
}

// TestZooKeeperHandoffMakesTheNextPlace: a handoff makes, in its own
// multi, the place of the waiter after the one it hands the key to, just
// behind the new lock, so that the next release hands the key on too. The
// watch that place keeps on the lock wakes nobody when a release through
// the instance deletes it: the release wakes the waiter itself.
func TestZooKeeperHandoffMakesTheNextPlace(t *testing.T) {
	srv := zktest.Start(t)
	var woken releases
	z := newZK(t, []string{srv.Addr()}, Options{Events: &woken})
	raw := rawZK(t, srv.Addr())
	key := "handoff-line"
	first := mustGrant(t, z, key, hold("a", time.Minute))
	b, c, d := waiterFor("b", time.Minute), waiterFor("c", time.Minute), waiterFor("d", time.Minute)
	mustBusy(t, z, key, b)

	releaseThen(t, z, key, "a", b, c)
	// The versions the creates left say that c's place is just behind b's,
	// now b's lock: known at once, with no listing.
	if ahead, bLock := z.placeAhead(key, "c"), z.ownLock(key, "b"); ahead == "" || ahead != bLock {
		t.Fatalf("c's place stands behind %q, want b's place %q", ahead, bLock)
	}
	bPlace, bStat := place(t, raw, key, "b")
	if _, cStat := place(t, raw, key, "c"); !becameLease(bStat) || !freshPlace(cStat) || len(lockNodes(t, raw, key)) != 2 {
		t.Fatalf("after a's release: b's place at version %d, c's at %d, nodes %v; want b's written, c's made",
			bStat.Version, cStat.Version, lockNodes(t, raw, key))
	}
	b.Next = c.Waiter
	gb := mustGrant(t, z, key, b)
	eventually(t, 10*time.Second, "c's watch on b's lock", func() bool { return z.watching(bPlace) })

	_, cPlaceStat := place(t, raw, key, "c")
	releaseThen(t, z, key, "b", c, d)
	cPlace, cStat := place(t, raw, key, "c")
	if _, dStat := place(t, raw, key, "d"); !becameLease(cStat) || !freshPlace(dStat) {
		t.Fatalf("after b's release: c's place at version %d, d's at %d; want c's written by the release, d's made",
			cStat.Version, dStat.Version)
	}
	gc := mustGrant(t, z, key, c)
	if gc.Fence != cPlaceStat.Czxid || gc.Fence <= gb.Fence || gb.Fence <= first.Fence {
		t.Fatalf("fences a %d, b %d, c %d; c's place czxid %d", first.Fence, gb.Fence, gc.Fence, cPlaceStat.Czxid)
	}
	eventually(t, 10*time.Second, "the watch on b's lock to fire", func() bool { return !z.watching(bPlace) })
	if n := woken.count(key); n != 0 {
		t.Fatalf("the releases through the instance woke waiters %d times by watch; want 0", n)
	}
	if _, stat, err := raw.Get(cPlace); err != nil || !becameLease(stat) {
		t.Fatalf("c's lock: %+v %v", stat, err)
	}
}

// becameLease reports whether a waiter's place, as stat says, is now its
// lease: replaced by its promoted node, persistent and not written since.
func becameLease(stat *zk.Stat) bool { return stat.EphemeralOwner == 0 && stat.Version == 0 }

// freshPlace reports whether a waiter's place, as stat says, is a place
// as made: ephemeral, never written.
func freshPlace(stat *zk.Stat) bool { return stat.EphemeralOwner != 0 && stat.Version == 0 }

// TestZooKeeperClaimMakesTheNextPlace: a waiter that takes the key by
// writing its place makes, in the same multi, the place of the instance's
// next waiter, so that its release hands the key on.
func TestZooKeeperClaimMakesTheNextPlace(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	key := "claim-line"
	mustGrant(t, z, key, hold("a", time.Minute))
	b, c := waiterFor("b", time.Minute), waiterFor("c", time.Minute)
	mustBusy(t, z, key, b)
	zkRelease(t, z, key, "a", true)

	b.Next = c.Waiter
	mustGrant(t, z, key, b)
	if _, cStat := place(t, raw, key, "c"); !freshPlace(cStat) {
		t.Fatalf("c's place: %+v, want a fresh place", cStat)
	}
	releaseThen(t, z, key, "b", c)
	if _, cStat := place(t, raw, key, "c"); !becameLease(cStat) || len(lockNodes(t, raw, key)) != 1 {
		t.Fatalf("after b's release: c's place at version %d, nodes %v; want it written by the release",
			cStat.Version, lockNodes(t, raw, key))
	}
	mustGrant(t, z, key, c)
}

// placeAhead is the node known to stand just before waiter id's place.
func (z *ZooKeeper) placeAhead(key, id string) string {
	z.mu.Lock()
	defer z.mu.Unlock()
	if n := z.own[z.places[zkLock{key, id}]]; n != nil {
		return n.ahead
	}
	return ""
}

// TestZooKeeperNoHandoffPastAWaiterMadeBetween: a place a handoff makes
// after another instance's waiter got its place is not just behind the
// new lock, and the next release does not hand it the key: the other
// waiter goes first.
func TestZooKeeperNoHandoffPastAWaiterMadeBetween(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	other := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	ctx, key := testCtx(t), "handoff-between"
	mustGrant(t, z, key, hold("a", time.Minute))
	b, c, o := waiterFor("b", time.Minute), waiterFor("c", time.Minute), waiterFor("o", time.Minute)
	mustBusy(t, z, key, b)
	mustBusy(t, other, key, o)

	releaseThen(t, z, key, "a", b, c)
	bPlace, _ := place(t, raw, key, "b")
	if ahead := z.placeAhead(key, "c"); ahead == bPlace {
		t.Fatalf("c's place taken to stand just behind b's, with o's between: %v", lockNodes(t, raw, key))
	}
	b.Next = c.Waiter
	mustGrant(t, z, key, b)
	releaseThen(t, z, key, "b", c)
	if _, stat := place(t, raw, key, "c"); stat.Version != 0 {
		t.Fatalf("c's place written (version %d): the key was handed past o", stat.Version)
	}
	var busy *engine.BusyError
	if _, err := z.Acquire(ctx, key, c); !errors.As(err, &busy) {
		t.Fatalf("c, behind o: %v, want refused", err)
	}
	mustGrant(t, other, key, o)
}

// TestZooKeeperUnknownClaimEndsAsALease: a place that became its waiter's
// lock without the instance hearing of it (a claim whose caller's ctx
// ended while it was on its way) is not left holding the key until the
// session ends: when the place's keep runs out, the instance finds the
// lock and ends it at its lease.
func TestZooKeeperUnknownClaimEndsAsALease(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	key := "unknown-claim"
	mustGrant(t, z, key, hold("a", time.Minute))
	b := waitHold("b", time.Minute)
	b.Waiter.Keep = 300 * time.Millisecond
	mustBusy(t, z, key, b)
	zkRelease(t, z, key, "a", true)

	p, _ := place(t, raw, key, "b")
	lock := zkData{Token: "b", Mode: engine.Lease}.lasts(time.Now(), time.Second)
	if _, err := raw.Set(p, lock.encode(), 0); err != nil {
		t.Fatal(err)
	}
	if h, held, err := z.Inspect(testCtx(t), key); !held || err != nil || h.Token != "b" {
		t.Fatalf("inspect: %+v %v %v", h, held, err)
	}
	eventually(t, 5*time.Second, "the lease of the unknown claim to end", func() bool {
		return len(lockNodes(t, raw, key)) == 0
	})
	if left := time.Until(lock.expiry()); left > 0 {
		t.Fatalf("the lock was deleted %v before its lease ran out", left)
	}
}
