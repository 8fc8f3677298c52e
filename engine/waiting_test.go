package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestWaitersAreServedInArrivalOrder: 20 clients wait for a held key in
// turn; each release hands the lock to the longest-waiting one.
func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	ctx := context.Background()
	holder, err := e.Lock(ctx, e.NewOwner(0), "k", Hold{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	granted := make(chan int, n)
	tokens := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		tokens[i] = fmt.Sprint("w", i)
		wg.Go(func() {
			if _, err := e.LockWait(ctx, e.NewOwner(uint64(i+1)), "k", Hold{Token: tokens[i], TTL: time.Minute}); err != nil {
				t.Error(err)
				return
			}
			granted <- i
		})
		waitFor(t, "waiter queued", func() bool { return e.Waiters("k") == i+1 })
	}
	prev := holder.Token
	for want := range n {
		if ok, err := e.Unlock(ctx, "k", prev); !ok || err != nil {
			t.Fatalf("unlock %s: %v %v", prev, ok, err)
		}
		if got := <-granted; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
		prev = tokens[want]
	}
	wg.Wait()
	if e.Waiters("") != 0 {
		t.Fatalf("%d waiters left", e.Waiters(""))
	}
}

// TestCancelledWaiterPassesTheTurn: the head of the queue gives up; the
// next waiter becomes head and gets the lock on the next release.
func TestCancelledWaiterPassesTheTurn(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	bg := context.Background()
	h, _ := e.Lock(bg, e.NewOwner(0), "k", Hold{TTL: time.Minute})
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() {
		_, err := e.LockWait(ctx, e.NewOwner(1), "k", Hold{Token: "a", TTL: time.Minute})
		first <- err
	}()
	waitFor(t, "first waiter", func() bool { return e.Waiters("k") == 1 })
	second := make(chan error, 1)
	go func() {
		_, err := e.LockWait(bg, e.NewOwner(2), "k", Hold{Token: "b", TTL: time.Minute})
		second <- err
	}()
	waitFor(t, "second waiter", func() bool { return e.Waiters("k") == 2 })
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if e.Waiters("k") != 1 {
		t.Fatalf("%d waiters after one left", e.Waiters("k"))
	}
	e.Unlock(bg, "k", h.Token)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if m.held["k"] != "b" {
		t.Fatalf("held by %q", m.held["k"])
	}
}

// TestWaiterRetriesWhenTheLeaseRunsOut: with no release announced (the
// holder's lease expired upstream), the head retries after the holder's
// remaining lease and gets the lock.
func TestWaiterRetriesWhenTheLeaseRunsOut(t *testing.T) {
	m := newMem()
	m.busyFor = 30 * time.Millisecond
	e := newEngine(m)
	bg := context.Background()
	e.Lock(bg, e.NewOwner(0), "k", Hold{Token: "old", TTL: time.Minute})
	done := make(chan error, 1)
	go func() {
		_, err := e.LockWait(bg, e.NewOwner(1), "k", Hold{Token: "new", TTL: time.Minute})
		done <- err
	}()
	waitFor(t, "waiter", func() bool { return e.Waiters("k") == 1 })
	m.set(func(m *memBackend) { delete(m.held, "k") }) // expiry: nobody calls Released
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter never retried")
	}
}

func TestTooManyWaiters(t *testing.T) {
	m := newMem()
	e := mustNew(m, Config{MaxWaiters: 1})
	bg := context.Background()
	e.Lock(bg, e.NewOwner(0), "k", Hold{Token: "h", TTL: time.Minute})
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go e.LockWait(ctx, e.NewOwner(1), "k", Hold{Token: "a", TTL: time.Minute})
	waitFor(t, "waiter", func() bool { return e.Waiters("k") == 1 })
	if _, err := e.LockWait(bg, e.NewOwner(2), "k2", Hold{Token: "b", TTL: time.Minute}); !errors.Is(err, ErrTooManyWaiters) {
		t.Fatalf("second waiter: %v", err)
	}
}

func TestShutdownEndsWaits(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	bg := context.Background()
	e.Lock(bg, e.NewOwner(0), "k", Hold{Token: "h", TTL: time.Minute})
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := e.LockWait(bg, e.NewOwner(uint64(i+1)), "k", Hold{Token: fmt.Sprint(i), TTL: time.Minute})
			errs <- err
		}()
	}
	waitFor(t, "waiters", func() bool { return e.Waiters("k") == 2 })
	e.Shutdown(bg)
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrShuttingDown) {
			t.Fatalf("waiter at shutdown: %v", err)
		}
	}
}

// TestPromotedHeadRetriesWithoutNotification: the waiter that heads the
// queue after another's grant does not try at once (the key is held), but
// tries within a third of its place's keep, so a lost release notification
// or an expiry costs at most that.
func TestPromotedHeadRetriesWithoutNotification(t *testing.T) {
	m := newMem()
	e := mustNew(m, Config{BoundLease: 90 * time.Millisecond, WaiterKeep: 90 * time.Millisecond})
	bg := context.Background()
	h, _ := e.Lock(bg, e.NewOwner(0), "k", Hold{Token: "h", TTL: time.Minute})
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := e.LockWait(bg, e.NewOwner(1), "k", Hold{Token: "a", TTL: time.Minute}); first <- err }()
	waitFor(t, "first waiter", func() bool { return e.Waiters("k") == 1 })
	go func() {
		_, err := e.LockWait(bg, e.NewOwner(2), "k", Hold{Token: "b", TTL: time.Minute})
		second <- err
	}()
	waitFor(t, "second waiter", func() bool { return e.Waiters("k") == 2 })
	e.Unlock(bg, "k", h.Token)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	m.set(func(m *memBackend) { delete(m.held, "k") }) // a's lease expires: nobody announces it
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the promoted head never retried")
	}
}

// TestOwnEchoDoesNotWake: the nodes' echo of a release made through this
// instance does not make the next waiter try while the key is held again;
// a release announced by another instance does.
func TestOwnEchoDoesNotWake(t *testing.T) {
	m := newMem()
	m.busyFor = time.Minute
	e := newEngine(m)
	bg := context.Background()
	h, _ := e.Lock(bg, e.NewOwner(0), "k", Hold{Token: "h", TTL: time.Minute})
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := e.LockWait(bg, e.NewOwner(1), "k", Hold{Token: "a", TTL: time.Minute}); first <- err }()
	waitFor(t, "first waiter", func() bool { return e.Waiters("k") == 1 })
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go func() {
		_, err := e.LockWait(ctx, e.NewOwner(2), "k", Hold{Token: "b", TTL: time.Minute})
		second <- err
	}()
	waitFor(t, "second waiter", func() bool { return e.Waiters("k") == 2 })
	e.Unlock(bg, "k", h.Token)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	attempts := func() int { m.mu.Lock(); defer m.mu.Unlock(); return m.acquires }
	before := attempts()
	e.Released("k", h.Token) // the echo of our own release
	time.Sleep(50 * time.Millisecond)
	if attempts() != before {
		t.Fatalf("our own echo made the next waiter try (%d -> %d)", before, attempts())
	}
	e.Released("k", "released-elsewhere")
	waitFor(t, "a try after another instance's release", func() bool { return attempts() > before })
}

// TestWaitOutlastsUnavailableBackend: a waiter keeps waiting through
// ErrUnavailable (a ZooKeeper leader change) and gets the lock after it;
// a client that tries once gets the error.
func TestWaitOutlastsUnavailableBackend(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	m.down = 3
	if _, err := e.Lock(context.Background(), e.NewOwner(1), "k", Hold{TTL: time.Second}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("try once while unavailable: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := e.LockWait(ctx, e.NewOwner(2), "k", Hold{TTL: time.Second})
	if err != nil || g.Fence != 1 {
		t.Fatalf("wait through an outage: %+v %v", g, err)
	}
	if m.acquires != 4 {
		t.Fatalf("%d acquires, want 1 that failed + 2 retried through the outage + 1 granted", m.acquires)
	}
}

// TestWaiterSaysWhatItWants: a waiter's place carries the lock it will ask
// for — a lease of its TTL, or a bound lock with the bound lease — so that
// a backend can hand it a released key (the ZooKeeper backend does).
func TestWaiterSaysWhatItWants(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	ctx := context.Background()
	if _, err := e.Lock(ctx, e.NewOwner(0), "k", Hold{Token: "h", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := e.LockWait(wctx, e.NewOwner(0), "k", Hold{Token: "lease", TTL: 20 * time.Second, Name: "n"}); err == nil {
		t.Fatal("granted a held key")
	}
	bctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := e.LockWait(bctx, e.NewOwner(0), "k", Hold{Token: "bound"}); err == nil {
		t.Fatal("granted a held key")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[string]Waiter{
		"lease": {ID: "lease", TTL: 20 * time.Second, Mode: Lease, Name: "n"},
		"bound": {ID: "bound", TTL: e.Config().BoundLease, Mode: Bound},
	}
	seen := 0
	for _, w := range m.waiters {
		x, ok := want[w.ID]
		if !ok {
			continue
		}
		seen++
		if w.TTL != x.TTL || w.Mode != x.Mode || w.Name != x.Name {
			t.Fatalf("waiter %s asks for %v %s %q, want %v %s %q", w.ID, w.TTL, w.Mode, w.Name, x.TTL, x.Mode, x.Name)
		}
	}
	if seen < 2 {
		t.Fatalf("saw %d of the 2 waiters", seen)
	}
}
