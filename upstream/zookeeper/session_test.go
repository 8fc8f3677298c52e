package zookeeper

import (
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

func countGoroutines() int { return runtime.NumGoroutine() }

// goroutineDump is every goroutine's stack.
func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestZooKeeperBriefDisconnect: while the connection is down, acquires are
// refused at once; when it returns within the session timeout, the session
// and its locks are intact and nothing is reported lost.
func TestZooKeeperBriefDisconnect(t *testing.T) {
	srv := zktest.Start(t)
	proxy := zktest.NewProxy(t, srv.Addr())
	var events releases
	a := newZK(t, []string{proxy.Addr()}, Options{SessionTimeout: 4 * time.Second, Events: &events})
	b := newZK(t, []string{srv.Addr()}, Options{})
	ctx := testCtx(t)
	g := mustGrant(t, a, "brief", hold("t1", time.Minute))

	proxy.Cut()
	eventually(t, 5*time.Second, "disconnected", func() bool { return !a.Connected() })
	start := time.Now()
	if _, err := a.Acquire(ctx, "other", hold("t2", time.Second)); !errors.Is(err, ErrNotConnected) || !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("acquire while disconnected: %v, want ErrNotConnected, an engine.ErrUnavailable", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("refusal took %v", d)
	}
	proxy.Restore()
	eventually(t, 5*time.Second, "reconnected", a.Connected)
	if h, ok, err := b.Inspect(ctx, "brief"); !ok || err != nil || h.Fence != g.Fence {
		t.Fatalf("lock after a brief disconnect: %+v, %v, %v", h, ok, err)
	}
	if _, err := a.Extend(ctx, "brief", "t1", 0, ""); err != nil {
		t.Fatal(err)
	}
	if lost := events.lostLocks(); len(lost) != 0 {
		t.Fatalf("locks reported lost: %v", lost)
	}
}

// TestZooKeeperSessionExpiry: a partition longer than the session timeout
// expires the session: ZooKeeper deletes its connection-bound locks, the
// instance reports them lost to the engine (Events.Lost, once each; the
// engine answers the holder's next RENEW or UNLOCK with ErrLost), and
// works again with a new session. Leases are not lost: they outlive the
// session.
func TestZooKeeperSessionExpiry(t *testing.T) {
	srv := zktest.Start(t)
	proxy := zktest.NewProxy(t, srv.Addr())
	var events releases
	a, err := New(Options{Servers: []string{proxy.Addr()}, SessionTimeout: time.Second,
		Events: &events}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	eventually(t, 5*time.Second, "session", a.Connected)
	b := newZK(t, []string{srv.Addr()}, Options{})
	ctx := testCtx(t)

	mustGrant(t, a, "lease", hold("t1", time.Minute))
	bound := hold("t2", time.Minute)
	bound.Mode = engine.Bound
	mustGrant(t, a, "bound", bound)
	mustGrant(t, a, "released", hold("t3", time.Minute))
	zkRelease(t, a, "released", "t3", true)
	mustBusy(t, a, "lease", waitHold("w", time.Minute)) // a place, not a lock: not lost

	proxy.Cut()
	eventually(t, 5*time.Second, "disconnected", func() bool { return !a.Connected() })
	if _, err := a.Acquire(ctx, "other", hold("t4", time.Second)); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("acquire while disconnected: %v", err)
	}
	eventually(t, 10*time.Second, "bound lock of the expired session deleted", func() bool {
		_, ok, err := b.Inspect(ctx, "bound")
		return !ok && err == nil
	})
	mustGrant(t, b, "bound", hold("other", time.Minute)) // someone else may take it now
	if h, ok, err := b.Inspect(ctx, "lease"); !ok || err != nil || h.Token != "t1" {
		t.Fatalf("lease after its session expired: %+v, %v, %v", h, ok, err)
	}
	proxy.Restore()
	eventually(t, 10*time.Second, "new session", a.Connected)
	eventually(t, 5*time.Second, "loss reported", func() bool { return len(events.lostLocks()) == 1 })
	if lost, want := events.lostLocks(), []zkLock{{"bound", "t2"}}; !slices.Equal(lost, want) {
		t.Fatalf("reported lost %v, want %v", lost, want)
	}

	if _, err := a.Extend(ctx, "bound", "t2", 0, ""); !errors.Is(err, engine.ErrNotHeld) {
		t.Fatalf("extend after the loss: %v, want ErrNotHeld", err)
	}
	if _, err := a.Extend(ctx, "lease", "t1", 0, ""); err != nil {
		t.Fatalf("extend the lease through the new session: %v", err)
	}
	zkRelease(t, a, "bound", "t2", false)
	zkRelease(t, a, "released", "t3", false)
	zkRelease(t, a, "lease", "t1", true)

	mustGrant(t, a, "lease", hold("t4", time.Minute)) // the new session takes locks
	if lost := events.lostLocks(); len(lost) != 1 {
		t.Fatalf("lost %v", lost)
	}
}

// TestZooKeeperFencesAcrossLeaderChange: on a three-server ensemble, a lock
// held while the leader dies stays held with its fence, and grants after
// the new leader is elected get larger fences.
func TestZooKeeperFencesAcrossLeaderChange(t *testing.T) {
	ens := zktest.StartEnsemble(t, 3)
	a := newZK(t, ens.Addrs(), Options{SessionTimeout: 10 * time.Second})
	b := newZK(t, ens.Addrs(), Options{SessionTimeout: 10 * time.Second})
	ctx := testCtx(t)
	var last int64
	grant := func(z *ZooKeeper, key, token string) engine.Grant {
		t.Helper()
		var g engine.Grant
		eventually(t, 60*time.Second, "grant on "+key, func() bool {
			var err error
			g, err = z.Acquire(ctx, key, hold(token, time.Minute))
			return err == nil
		})
		if key == "fence" && g.Fence <= last {
			t.Fatalf("fence %d after %d", g.Fence, last)
		}
		return g
	}
	for i := range 5 {
		g := grant(a, "fence", "t"+string(rune('0'+i)))
		last = g.Fence
		zkRelease(t, b, "fence", g.Token, true)
	}
	held := grant(b, "held", "h")

	if _, _, err := ens.KillLeader(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		g := grant([]*ZooKeeper{a, b}[i%2], "fence", "u"+string(rune('0'+i)))
		last = g.Fence
		eventually(t, 60*time.Second, "release", func() bool { // a retry may find it released already
			if _, err := a.Release(ctx, "fence", g.Token, nil, nil); err != nil {
				return false
			}
			_, ok, err := a.Inspect(ctx, "fence")
			return !ok && err == nil
		})
	}
	if h, ok, err := a.Inspect(ctx, "held"); !ok || err != nil || h.Fence != held.Fence || h.Token != "h" {
		t.Fatalf("lock held across the leader change: %+v, %v, %v", h, ok, err)
	}
}

// TestZooKeeperSessionExpiresDuringAcquire: the session that created a
// connection-bound try's node expires before the try looks at the key's
// nodes. The try must not grant (its node went with the session), must
// leave no node, and the key stays free for another instance.
func TestZooKeeperSessionExpiresDuringAcquire(t *testing.T) {
	srv := zktest.Start(t)
	proxy := zktest.NewProxy(t, srv.Addr())
	a, err := New(Options{Servers: []string{proxy.Addr()}, SessionTimeout: time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	eventually(t, 5*time.Second, "session", a.Connected)
	b := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	first := a.conn.SessionID()
	var hooked atomic.Bool
	a.createReturned = func(string) {
		if !hooked.CompareAndSwap(false, true) {
			return
		}
		proxy.Cut() // the answer is in hand; the session now expires
		eventually(t, 10*time.Second, "the node gone with the session", func() bool { return len(lockNodes(t, raw, "k")) == 0 })
		proxy.Restore()
		eventually(t, 10*time.Second, "a new session", func() bool { return a.Connected() && a.conn.SessionID() != first })
	}
	bound := hold("t", time.Minute)
	bound.Mode = engine.Bound
	g, err := a.Acquire(testCtx(t), "k", bound)
	if err == nil {
		t.Fatalf("granted %+v through a session that expired during the acquire", g)
	}
	if !hooked.Load() {
		t.Fatal("the create hook did not run")
	}
	if n := lockNodes(t, raw, "k"); len(n) != 0 {
		t.Fatalf("nodes left: %v", n)
	}
	mustGrant(t, b, "k", hold("other", time.Minute))
}
