package zookeeper

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// Adversarial sequences against the design of issue 25, each forced on a
// real ZooKeeper (review atk25).

// convertedTo waits until key's lowest node on the server is a node of
// kind, the converted node of a mode change.
func convertedTo(t *testing.T, srvAddr, key string, kind byte) {
	t.Helper()
	raw := rawZK(t, srvAddr)
	eventually(t, 10*time.Second, "the converted node on the server", func() bool {
		kids := parseChildren(lockNodes(t, raw, key))
		return len(kids) > 0 && len(kids[0].name) > tokenIDLen+1 && kids[0].name[tokenIDLen+1] == kind
	})
}

// TestZKAttackLostConvertReplyIsUnknown: T holds a lease through A; LOCK
// … TOKEN T without a TTL (bound) through A converts the node to an
// ephemeral one of A's session; the multi lands but its reply is lost. The
// lock's mode changed, so A must not answer "unavailable, nothing was
// granted": the client would keep counting on its lease, which now ends
// with A's session — here before the lease's own end.
func TestZKAttackLostConvertReplyIsUnknown(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	b := newTimedZK(t, srv.Addr())
	key := "lost-convert"
	g := mustGrant(t, a, key, hold("T", 30*time.Second))
	leaseEnd := time.Now().Add(g.Validity)
	link.delay.SetDelay(700 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(testCtx(t), key, boundHold("T", 30*time.Second))
		done <- err
	}()
	convertedTo(t, srv.Addr(), key, kindBound)
	link.cut.Cut() // the multi's reply is still on the slow link
	link.delay.SetDelay(0)
	err := <-done
	if !errors.Is(err, engine.ErrOutcomeUnknown) {
		// Show what the guess costs: A's session ends while cut off, and
		// with it the node of the lease the client still counts on.
		granted := false
		for deadline := time.Now().Add(3 * sessionTimeout); !granted && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			_, aerr := b.Acquire(testCtx(t), key, hold("C", time.Second))
			granted = aerr == nil
		}
		t.Fatalf("A's answer to a conversion whose reply was lost: %v; want an unknown outcome (C granted %v, %v before T's lease ended)",
			err, granted, time.Until(leaseEnd).Round(time.Millisecond))
	}
	link.cut.Restore()
}

// TestZKAttackWaiterWatchFollowsConversion: W waits through B behind T's
// lease, watching its node; T's LOCK … TOKEN through A changes the lock's
// mode twice (lease → bound → lease), each a delete and a create at the
// same sequence. W's watch fires on each delete: W is not let in, the
// watch follows the converted node, and when T releases W gets the key
// with a larger fence.
func TestZKAttackWaiterWatchFollowsConversion(t *testing.T) {
	srv := zktest.Start(t)
	a := newTimedZK(t, srv.Addr())
	var woken releases
	b := newZK(t, []string{srv.Addr()}, Options{SessionTimeout: sessionTimeout, Events: &woken})
	raw := rawZK(t, srv.Addr())
	key := "watch-conversion"
	first := mustGrant(t, a, key, hold("T", 30*time.Second))
	w := waiterFor("W", 30*time.Second)
	mustBusy(t, b, key, w)
	for i, h := range []engine.Hold{boundHold("T", 30*time.Second), hold("T", 30*time.Second)} {
		if g := mustGrant(t, a, key, h); g.Fence != first.Fence {
			t.Fatalf("conversion %d: fence %d, want %d", i, g.Fence, first.Fence)
		}
		top := DefaultRoot + "/" + encodeKey(key) + "/" + parseChildren(lockNodes(t, raw, key))[0].name
		eventually(t, 10*time.Second, "W's watch on the converted node", func() bool { return b.watching(top) })
		if n := woken.count(key); n != 0 {
			t.Fatalf("conversion %d woke W %d times", i, n)
		}
		mustBusy(t, b, key, w)
	}
	zkRelease(t, a, key, "T", true)
	eventually(t, 10*time.Second, "W woken by T's release", func() bool { return woken.count(key) > 0 })
	g := mustGrant(t, b, key, w)
	if g.Fence <= first.Fence {
		t.Fatalf("W's fence %d after T's %d", g.Fence, first.Fence)
	}
}

// TestZKAttackTwoInstancesReapOneLease: T's lease, granted through A,
// which is then gone, runs out; B and C, each with a client wanting the
// key, end it at once. One of them is granted, the other refused, and the
// fence is larger than T's: two deletes of one lease, each checked
// against the version read, cannot free the key twice.
func TestZKAttackTwoInstancesReapOneLease(t *testing.T) {
	srv := zktest.Start(t)
	a := newTimedZK(t, srv.Addr())
	b := newZK(t, []string{srv.Addr()}, Options{})
	c := newZK(t, []string{srv.Addr()}, Options{})
	key := "reap-twice"
	for round := range 3 {
		tok := "T" + string(rune('0'+round))
		// Long enough that a loaded ZooKeeper answers the grant within
		// it: with 300 ms, two suites at once made A's grant come back
		// after its lease ("answered after the lease ran out").
		first := mustGrant(t, a, key, hold(tok, 2*time.Second))
		if round == 2 {
			a.Close() // nobody's timer ends it: only the reaps
		}
		var winners []engine.Grant
		deadline := time.Now().Add(15 * time.Second)
		for len(winners) == 0 && time.Now().Before(deadline) {
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i, z := range []*ZooKeeper{b, c} {
				wg.Go(func() {
					g, err := z.Acquire(testCtx(t), key, hold(string(rune('X'+i)), 20*time.Second))
					if err == nil {
						mu.Lock()
						winners = append(winners, g)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
		}
		if len(winners) != 1 || winners[0].Fence <= first.Fence {
			t.Fatalf("round %d: grants after T's lease (fence %d) ran out: %+v; want one, with a larger fence", round, first.Fence, winners)
		}
		if round < 2 {
			zkRelease(t, b, key, winners[0].Token, true)
		}
	}
}

// TestZKAttackRetryOvertakesSlowCreate: T's LOCK through A is slow (a
// delayed link); the client's retry with the same token through B lands
// first and is granted. A's create then lands behind B's node, finds T
// holding the key, and grants it again with the same fence; A's own node
// goes, one lock node stays, and T's UNLOCK frees the key.
func TestZKAttackRetryOvertakesSlowCreate(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	b := newTimedZK(t, srv.Addr())
	raw := rawZK(t, srv.Addr())
	key := "overtaken"
	link.delay.SetDelay(500 * time.Millisecond)
	type result struct {
		g   engine.Grant
		err error
	}
	slow := make(chan result, 1)
	go func() {
		g, err := a.Acquire(testCtx(t), key, hold("T", 20*time.Second))
		slow <- result{g, err}
	}()
	fast := mustGrant(t, b, key, hold("T", 20*time.Second))
	r := <-slow
	link.delay.SetDelay(0)
	if r.err != nil || r.g.Fence != fast.Fence {
		t.Fatalf("A's grant %+v, %v; want T's lock again, fence %d", r.g, r.err, fast.Fence)
	}
	eventually(t, 10*time.Second, "one lock node", func() bool { return len(lockNodes(t, raw, key)) == 1 })
	mustBusy(t, b, key, hold("C", time.Second))
	zkRelease(t, a, key, "T", true)
	mustGrant(t, b, key, hold("C", time.Second))
}

// TestZKAttackConvertRacesUnlockElsewhere: T's LOCK … TOKEN without a TTL
// (a conversion to bound) through a slow A races T's UNLOCK through B,
// sent a little later each round. Whatever the order, the node left
// fits its mode (a bound lock is A's session's ephemeral node, a lease a
// persistent one), and a key still held is T's with the fence A answered.
func TestZKAttackConvertRacesUnlockElsewhere(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	b := newTimedZK(t, srv.Addr())
	raw := rawZK(t, srv.Addr())
	for round := range 8 {
		key := "convert-unlock-" + string(rune('a'+round))
		first := mustGrant(t, a, key, hold("T", 30*time.Second))
		link.delay.SetDelay(150 * time.Millisecond)
		type result struct {
			g   engine.Grant
			err error
		}
		conv := make(chan result, 1)
		go func() {
			g, err := a.Acquire(testCtx(t), key, boundHold("T", 30*time.Second))
			conv <- result{g, err}
		}()
		time.Sleep(time.Duration(round) * 250 * time.Millisecond) // the interleaving this round tries
		released, rerr := b.Release(testCtx(t), key, "T", nil, nil)
		r := <-conv
		link.delay.SetDelay(0)
		if rerr != nil {
			t.Fatalf("round %d: release: %v", round, rerr)
		}
		if r.err != nil && !errors.Is(r.err, engine.ErrNotAcquired) {
			t.Fatalf("round %d: conversion: %v", round, r.err)
		}
		h, held, err := b.Inspect(testCtx(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if n := lockNodes(t, raw, key); len(n) > 1 {
			t.Fatalf("round %d: nodes %v", round, n)
		}
		if held {
			data, stat := lowest(t, raw, key)
			d := zkDataOf(data)
			if !modeFits(d.Mode, stat.EphemeralOwner, a.conn.SessionID()) {
				t.Fatalf("round %d: %s owned by %x: mode and node disagree", round, data, stat.EphemeralOwner)
			}
			if r.err != nil || h.Token != "T" || h.Fence != r.g.Fence || r.g.Fence < first.Fence {
				t.Fatalf("round %d: held by %+v after release %v and conversion %+v %v", round, h, released, r.g, r.err)
			}
		}
		t.Logf("round %d: first fence %d, released %v, conversion %+v %v, held after %v", round, first.Fence, released, r.g, r.err, held)
	}
}

// TestZKAttackLateAttemptDoesNotShortenRetry: T's bound LOCK through A is
// slow, and its client gives up on it (the connection closes: the call's
// ctx ends) and retries through B, which grants it. A's attempt lands
// late and finds T's lock: it must not take the lock from the grant it
// lost to (PRODUCT: an earlier attempt that lands late never releases or
// shortens the grant it retried). Moving the node into A's session does:
// A's shutdown, which nobody on A holds anything against, deletes it, and
// another client gets the key within the validity B stated.
func TestZKAttackLateAttemptDoesNotShortenRetry(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	b := newTimedZK(t, srv.Addr())
	raw := rawZK(t, srv.Addr())
	key := "late-attempt"
	link.delay.SetDelay(150 * time.Millisecond)
	link.delay.SetBlackhole(true) // A's attempt lands after the retry's grant
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctx, key, boundHold("T", 30*time.Second))
		done <- err
	}()
	asked := time.Now()
	g := mustGrant(t, b, key, boundHold("T", 30*time.Second)) // the client's retry
	link.delay.SetBlackhole(false)
	validUntil := asked.Add(g.Validity)
	session, moved := a.conn.SessionID(), false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if kids := lockNodes(t, raw, key); len(kids) == 0 {
			break
		}
		if _, stat := lowest(t, raw, key); stat.EphemeralOwner == session {
			moved = true // A's late attempt took the node into its session
			break
		}
		select {
		case err := <-done:
			done <- err
			deadline = time.Time{} // A's attempt is over: nothing moved
		default:
		}
	}
	cancel() // the client went away from A
	err := <-done
	link.delay.SetDelay(0)
	if err == nil {
		t.Fatal("A's attempt granted to a caller that had gone")
	}
	a.Close() // A shuts down: nothing on A holds T's lock
	for time.Now().Before(validUntil) {
		if c, err := b.Acquire(testCtx(t), key, hold("C", time.Second)); err == nil {
			t.Fatalf("C granted %+v %v before the end of the validity B gave T's retry (node moved into A's session: %v)",
				c, time.Until(validUntil).Round(time.Millisecond), moved)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestZKAttackParkedLockRenewedBound: a bound lock of T that A moved into
// its session for a caller that went away (disown) is parked as a lease
// when A closes, keeping its fence; the watchdog's renewal through B, the
// instance of T's holder, makes it bound again, in B's session.
func TestZKAttackParkedLockRenewedBound(t *testing.T) {
	srv := zktest.Start(t)
	a := newTimedZK(t, srv.Addr())
	b := newTimedZK(t, srv.Addr())
	raw := rawZK(t, srv.Addr())
	key := "parked"
	g := mustGrant(t, b, key, boundHold("T", 30*time.Second))
	mustGrant(t, a, key, boundHold("T", 30*time.Second)) // moves it into A's session
	p := a.ownLock(key, "T")
	if p == "" {
		t.Fatal("A does not know the lock it moved")
	}
	a.disown(key, "T", p) // as if A's caller had gone
	a.Close()
	data, stat := lowest(t, raw, key)
	if d := zkDataOf(data); stat.EphemeralOwner != 0 || d.Mode != engine.Lease || !d.Parked || d.Fence != g.Fence {
		t.Fatalf("after A's close: %s owned by %x; want a parked lease with fence %d", data, stat.EphemeralOwner, g.Fence)
	}
	if _, err := b.Extend(testCtx(t), key, "T", 30*time.Second, engine.Bound); err != nil {
		t.Fatalf("B's renewal of the parked lock: %v", err)
	}
	data, stat = lowest(t, raw, key)
	if d := zkDataOf(data); d.Mode != engine.Bound || d.Parked || !modeFits(d.Mode, stat.EphemeralOwner, b.conn.SessionID()) {
		t.Fatalf("after B's renewal: %s owned by %x; want bound in B's session", data, stat.EphemeralOwner)
	}
	if h, held, err := b.Inspect(testCtx(t), key); err != nil || !held || h.Token != "T" || h.Fence != g.Fence {
		t.Fatalf("after B's renewal: %+v %v %v", h, held, err)
	}
}

// TestZKAttackRenewThroughOtherInstanceParked: a renewal that keeps the
// mode (RENEW without a ttl) of T's bound lock through A, where nobody
// holds it, moves it into A's session; A's close parks it rather than
// delete it from under its holder on B.
func TestZKAttackRenewThroughOtherInstanceParked(t *testing.T) {
	srv := zktest.Start(t)
	a := newTimedZK(t, srv.Addr())
	b := newTimedZK(t, srv.Addr())
	raw := rawZK(t, srv.Addr())
	key := "renew-elsewhere"
	g := mustGrant(t, b, key, boundHold("T", 30*time.Second))
	if _, err := a.Extend(testCtx(t), key, "T", 0, ""); err != nil {
		t.Fatalf("renewal through A: %v", err)
	}
	if _, stat := lowest(t, raw, key); stat.EphemeralOwner != a.conn.SessionID() {
		t.Fatalf("renewal through A left the node owned by %x", stat.EphemeralOwner)
	}
	a.Close()
	if h, held, err := b.Inspect(testCtx(t), key); err != nil || !held || h.Token != "T" || h.Fence != g.Fence {
		t.Fatalf("after A's close: %+v %v %v; want T's lock, fence %d", h, held, err, g.Fence)
	}
}

// TestZKAttackLostShorteningReplyIsUnknown: T holds a 30s lease through
// A; LOCK … PX 2000 TOKEN T through A rewrites it in place, shortened; the
// write lands but its reply is lost. The answer is an unknown outcome:
// "nothing was granted" would have the client count on its 30s lease,
// which now ends in 2s.
func TestZKAttackLostShorteningReplyIsUnknown(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	raw := rawZK(t, srv.Addr())
	key := "lost-shorten"
	mustGrant(t, a, key, hold("T", 30*time.Second))
	link.delay.SetDelay(700 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(testCtx(t), key, hold("T", 2*time.Second))
		done <- err
	}()
	eventually(t, 10*time.Second, "the shortened lease on the server", func() bool {
		_, stat := lowest(t, raw, key)
		return stat.Version > 0
	})
	link.cut.Cut() // the set's reply is still on the slow link
	link.delay.SetDelay(0)
	err := <-done
	link.cut.Restore()
	if !errors.Is(err, engine.ErrOutcomeUnknown) {
		t.Fatalf("A's answer to a shortening write whose reply was lost: %v; want an unknown outcome", err)
	}
}

// TestZKAttackExpiredLeaseNotHandedOver: T's lease through A has run out,
// and A's own timer, on a slow link, has not deleted it yet; T's UNLOCK
// through A, with a waiter of A behind it, answers not held (0), as for a
// lease past its TTL on Redis, rather than handing the key on as if T
// still held it.
func TestZKAttackExpiredLeaseNotHandedOver(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	raw := rawZK(t, srv.Addr())
	key := "expired-handoff"
	mustGrant(t, a, key, hold("T", 1500*time.Millisecond))
	mustBusy(t, a, key, waiterFor("W", 30*time.Second))
	data, _ := lowest(t, raw, key)
	expiry := zkDataOf(data).expiry()
	link.delay.SetDelay(400 * time.Millisecond) // A's timer takes a while to delete it
	eventually(t, 5*time.Second, "past expires_at", func() bool { return time.Now().After(expiry.Add(20 * time.Millisecond)) })
	ok, err := a.Release(testCtx(t), key, "T", []engine.Waiter{{ID: "W"}}, nil)
	link.delay.SetDelay(0)
	if ok || err != nil {
		t.Fatalf("UNLOCK of a lease past its expires_at: %v, %v; want not held", ok, err)
	}
}

// TestZKAttackWaiterNotWokenByAMove: W waits through B behind T's bound
// lock, whose node is a converted one (kind b). T's retry through another
// instance moves the lock into that instance's session: the node is
// deleted and made again under the same name in one multi. W's watch
// follows it instead of waking W for a release that did not happen.
func TestZKAttackWaiterNotWokenByAMove(t *testing.T) {
	srv := zktest.Start(t)
	a := newTimedZK(t, srv.Addr())
	c := newTimedZK(t, srv.Addr())
	var woken releases
	b := newZK(t, []string{srv.Addr()}, Options{SessionTimeout: sessionTimeout, Events: &woken})
	raw := rawZK(t, srv.Addr())
	key := "moved-watch"
	mustGrant(t, a, key, boundHold("T", 30*time.Second))
	mustGrant(t, c, key, boundHold("T", 30*time.Second)) // now a node of kind b, C's
	w := waiterFor("W", 30*time.Second)
	mustBusy(t, b, key, w)
	for i, z := range []*ZooKeeper{a, c} {
		mustGrant(t, z, key, boundHold("T", 30*time.Second)) // moved, same name
		top := DefaultRoot + "/" + encodeKey(key) + "/" + parseChildren(lockNodes(t, raw, key))[0].name
		if _, stat := lowest(t, raw, key); stat.EphemeralOwner != z.conn.SessionID() {
			t.Fatalf("move %d: not moved", i)
		}
		eventually(t, 10*time.Second, "W's watch on the moved node", func() bool { return b.watching(top) || woken.count(key) > 0 })
		mustBusy(t, b, key, w) // a few round trips: time for a wake to show
		if n := woken.count(key); n != 0 {
			t.Fatalf("move %d woke W %d times; nothing was released", i, n)
		}
	}
	zkRelease(t, c, key, "T", true)
	eventually(t, 10*time.Second, "W woken by T's release", func() bool { return woken.count(key) > 0 })
	mustGrant(t, b, key, w)
}

// TestZKAttackLostReleaseReplyIsUnknown: T's UNLOCK through A deletes its
// lock, but the reply is lost. The key may be free (here it is), so A
// answers that the outcome is unknown, not "unavailable, nothing was
// granted", which reads as the lock still being T's.
func TestZKAttackLostReleaseReplyIsUnknown(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	raw := rawZK(t, srv.Addr())
	key := "lost-release"
	mustGrant(t, a, key, hold("T", 30*time.Second))
	link.delay.SetDelay(700 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		ok, err := a.Release(testCtx(t), key, "T", nil, nil)
		if ok && err == nil {
			err = errors.New("released, though the reply was cut")
		}
		done <- err
	}()
	eventually(t, 10*time.Second, "the lock deleted on the server", func() bool { return len(lockNodes(t, raw, key)) == 0 })
	link.cut.Cut() // the reply is still on the slow link
	link.delay.SetDelay(0)
	err := <-done
	link.cut.Restore()
	if !errors.Is(err, engine.ErrOutcomeUnknown) {
		t.Fatalf("A's answer to a release whose reply was lost: %v; want an unknown outcome", err)
	}
}

// TestZKAttackBoundHandoffToADepartedWaiter: issue 25's sequence 6 with a
// waiter asking for a bound lock, which the handoff writes into its place
// rather than replacing it: the waiter's Leave, while the handoff is on
// its way, and the handoff, whichever lands second, leave the key free,
// and no lock of the waiter's.
func TestZKAttackBoundHandoffToADepartedWaiter(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	b := newTimedZK(t, srv.Addr())
	raw := rawZK(t, srv.Addr())
	for round, leaveFirst := range []bool{true, false} {
		key := "departed-bound-" + string(rune('a'+round))
		mustGrant(t, a, key, hold("T", 30*time.Second))
		w := waiterFor("W", 30*time.Second)
		w.Mode, w.Waiter.Mode = engine.Bound, engine.Bound
		mustBusy(t, a, key, w)
		link.delay.SetDelay(400 * time.Millisecond)
		released := releaseToW(t, a, key)
		if !leaveFirst { // else the Leave goes at once, alongside the handoff
			eventually(t, 10*time.Second, "the handoff on the server", func() bool {
				kids := parseChildren(lockNodes(t, raw, key))
				if len(kids) == 0 {
					return false
				}
				_, stat, err := raw.Get(DefaultRoot + "/" + encodeKey(key) + "/" + kids[0].name)
				return err == nil && stat.Version > 0 // not err: deleted since listed
			})
		}
		if err := a.Leave(testCtx(t), key, "W"); err != nil {
			t.Fatal(err)
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		link.delay.SetDelay(0)
		eventually(t, 10*time.Second, "the key free", func() bool {
			_, err := b.Acquire(testCtx(t), key, hold("C", time.Second))
			return err == nil
		})
		if _, err := b.Extend(testCtx(t), key, "W", 0, ""); !errors.Is(err, engine.ErrNotHeld) {
			t.Fatalf("round %d: renew by the departed waiter: %v; want not held", round, err)
		}
	}
}
