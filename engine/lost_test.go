package engine

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// told records what an owner's OnLost hears.
type told struct {
	mu  sync.Mutex
	got []string
}

func (r *told) hear(o *Owner) {
	o.OnLost(func(key, reason string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, key+" "+reason)
	})
}

func (r *told) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// TestTakeTellsTheHolderOnly: a release without the token from another
// connection (Take) tells the connection that took the lock, bound or
// lease, and its next command about the key hears it once. The holder's
// own Take, UNLOCK with the token from any connection (pooled clients),
// and a DEL of a lock a legacy command took (how legacy code unlocks),
// tell nobody.
func TestTakeTellsTheHolderOnly(t *testing.T) {
	ctx := context.Background()
	e := newEngine(newMem())
	a, b := e.NewOwner(1), e.NewOwner(2)
	var heard told
	heard.hear(a)
	bound, err := e.Lock(ctx, a, "bound", Hold{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := e.Lock(ctx, a, "lease", Hold{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	own, _ := e.Lock(ctx, a, "own", Hold{TTL: time.Minute})
	pooled, _ := e.Lock(ctx, a, "pooled", Hold{TTL: time.Minute})
	legacy, _ := e.Lock(ctx, a, "legacy", Hold{TTL: time.Minute, Legacy: true})

	for _, k := range []struct{ key, token string }{{"bound", bound.Token}, {"lease", lease.Token}} {
		if ok, err := e.Take(ctx, b, k.key, k.token); !ok || err != nil {
			t.Fatalf("Take %s: %v %v", k.key, ok, err)
		}
	}
	if ok, _ := e.Take(ctx, a, "own", own.Token); !ok {
		t.Fatal("the holder's own DEL did not release")
	}
	if ok, _ := e.Unlock(ctx, "pooled", pooled.Token); !ok {
		t.Fatal("UNLOCK with the token did not release")
	}
	if ok, _ := e.Take(ctx, b, "legacy", legacy.Token); !ok {
		t.Fatal("DEL of a legacy lock did not release")
	}
	if got, want := heard.all(), []string{"bound deleted", "lease deleted"}; !slices.Equal(got, want) {
		t.Fatalf("told %v, want %v", got, want)
	}
	var lost *LostError
	if err := a.TakeLost("bound"); !errors.As(err, &lost) || lost.Reason != LostDeleted {
		t.Fatalf("TakeLost: %v", err)
	}
	if err := a.TakeLost("bound"); err != nil {
		t.Fatalf("told twice: %v", err)
	}
	if err := b.TakeLost("lease"); err != nil {
		t.Fatalf("the connection that deleted it is told: %v", err)
	}
	if _, err := e.Renew(ctx, "lease", lease.Token, 0); !errors.As(err, &lost) {
		t.Fatalf("RENEW with the taken lease's token: %v, want LostError", err)
	}
	if err := a.TakeLost("lease"); err != nil {
		t.Fatalf("told twice: %v", err)
	}
	if n := e.Stats().Lost.Load(); n != 2 {
		t.Fatalf("%d losses counted, want 2", n)
	}
}

// TestRenewalFailureTellsTheHolder: the watchdog's loss is pushed to the
// holder's OnLost with its reason.
func TestRenewalFailureTellsTheHolder(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	o := e.NewOwner(1)
	var heard told
	heard.hear(o)
	if _, err := e.Lock(context.Background(), o, "k", Hold{}); err != nil {
		t.Fatal(err)
	}
	m.set(func(m *memBackend) { clear(m.held) })
	waitFor(t, "the loss told", func() bool { return len(heard.all()) == 1 })
	if got := heard.all()[0]; got != "k "+LostGone {
		t.Fatalf("told %q", got)
	}
}

// TestLockDelayKeepsTheLock: closing a connection keeps its bound locks on
// keys with a lock-delay (extended, not released) and releases the rest;
// RESET (Release) releases all at once.
func TestLockDelayKeepsTheLock(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	e := mustNew(m, Config{BoundLease: time.Minute, LockDelay: func(key string) time.Duration {
		if key == "delayed" || key == "reset" {
			return time.Minute
		}
		return 0
	}})
	o := e.NewOwner(1)
	for _, k := range []string{"delayed", "plain"} {
		if _, err := e.Lock(ctx, o, k, Hold{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	released, held := slices.Clone(m.released), len(m.held)
	m.mu.Unlock()
	if !slices.Equal(released, []string{"plain"}) || held != 1 || e.Stats().Delayed.Load() != 1 || e.BoundHeld() != 0 {
		t.Fatalf("released %v, %d held, %d delayed, %d still renewed", released, held, e.Stats().Delayed.Load(), e.BoundHeld())
	}

	r := e.NewOwner(2)
	if _, err := e.Lock(ctx, r, "reset", Hold{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, held := m.snapshot(); held != 1 {
		t.Fatalf("RESET kept the lock: %d held", held)
	}
}

// TestLeaseMemoryForgetsExpired: the leases a connection took that ran
// out are forgotten, so the engine's records stay within twice the live
// ones, and the connection is still told when its next lease is taken.
func TestLeaseMemoryForgetsExpired(t *testing.T) {
	ctx := context.Background()
	e := newEngine(newMem())
	a, b := e.NewOwner(1), e.NewOwner(2)
	var heard told
	heard.hear(a)
	for i := range 3 * minSweep {
		if _, err := e.Lock(ctx, a, "old:"+strconv.Itoa(i), Hold{TTL: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		if i%minSweep == minSweep-1 {
			time.Sleep(5 * time.Millisecond) // the leases' validity runs out
		}
	}
	e.mu.Lock()
	records := len(e.locks)
	e.mu.Unlock()
	if records > minSweep {
		t.Fatalf("%d records kept for %d leases that ran out", records, 3*minSweep)
	}
	g, err := e.Lock(ctx, a, "new", Hold{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.Take(ctx, b, "new", g.Token); !ok {
		t.Fatal("DEL did not release")
	}
	if got := heard.all(); !slices.Equal(got, []string{"new deleted"}) {
		t.Fatalf("told %v", got)
	}
}

// TestGrantOverALostBoundLockTellsItsHolder: when the store grants a key
// again while this instance still renews another token's bound lock on it
// (the lock expired or was deleted behind it), the new grant takes the
// key's record and the old holder is told its lock is gone, before any
// renewal of it would have found out.
func TestGrantOverALostBoundLockTellsItsHolder(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	e := mustNew(m, Config{BoundLease: time.Minute}) // no renewal during the test
	a, b := e.NewOwner(1), e.NewOwner(2)
	var heard told
	heard.hear(a)
	old, err := e.Lock(ctx, a, "k", Hold{})
	if err != nil {
		t.Fatal(err)
	}
	m.set(func(m *memBackend) { clear(m.held) }) // expired on the store
	for _, h := range []Hold{{}, {TTL: time.Minute}} {
		g, err := e.Lock(ctx, b, "k", h)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := e.Unlock(ctx, "k", g.Token); !ok {
			t.Fatal("the new holder's UNLOCK did not release")
		}
		if got := heard.all(); !slices.Equal(got, []string{"k " + LostGone}) {
			t.Fatalf("told %v after a grant of %+v", got, h)
		}
		var lost *LostError
		if _, err := e.Unlock(ctx, "k", old.Token); !errors.As(err, &lost) || lost.Reason != LostGone {
			t.Fatalf("the old holder's UNLOCK: %v", err)
		}
		if e.BoundHeld() != 0 {
			t.Fatalf("%d bound locks still renewed", e.BoundHeld())
		}
		heard = told{}
		heard.hear(a)
		if old, err = e.Lock(ctx, a, "k", Hold{}); err != nil {
			t.Fatal(err)
		}
		m.set(func(m *memBackend) { clear(m.held) })
	}
}

// stuckExtend is a memBackend whose first Extend waits for release and
// then finds the lock gone.
type stuckExtend struct {
	*memBackend
	first            sync.Once
	entered, release chan struct{}
}

func (s *stuckExtend) Extend(ctx context.Context, key, token string, ttl time.Duration, mode Mode) (time.Duration, error) {
	stuck := false
	s.first.Do(func() { stuck = true })
	if !stuck {
		return s.memBackend.Extend(ctx, key, token, ttl, mode)
	}
	close(s.entered)
	<-s.release
	return 0, ErrNotHeld
}

// TestRenewalAcrossAGrantIsDropped: a watchdog renewal that was on its way
// while its lock was released and granted again with the same token does
// not count against the new grant: the new lock is not declared lost, and
// its own renewals go on.
func TestRenewalAcrossAGrantIsDropped(t *testing.T) {
	ctx := context.Background()
	s := &stuckExtend{memBackend: newMem(), entered: make(chan struct{}), release: make(chan struct{})}
	e := newEngine(s)
	o := e.NewOwner(1)
	if _, err := e.Lock(ctx, o, "k", Hold{Token: "t"}); err != nil {
		t.Fatal(err)
	}
	<-s.entered
	if ok, err := e.Unlock(ctx, "k", "t"); !ok || err != nil {
		t.Fatalf("UNLOCK: %v %v", ok, err)
	}
	if _, err := e.Lock(ctx, o, "k", Hold{Token: "t"}); err != nil {
		t.Fatal(err)
	}
	close(s.release)
	waitFor(t, "the new lock's renewals", func() bool { n, _ := s.snapshot(); return n >= 2 })
	if n := e.Stats().Lost.Load(); n != 0 || e.BoundHeld() != 1 {
		t.Fatalf("%d losses, %d bound locks renewed: the old renewal hit the new grant", n, e.BoundHeld())
	}
}
