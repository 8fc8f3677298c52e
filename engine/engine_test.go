package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// memBackend is a single-node in-memory Backend whose Extend can be made
// to fail.
type memBackend struct {
	mu        sync.Mutex
	held      map[string]string // key -> token
	fence     int64
	extends   int
	extendErr error
	released  []string
	busyFor   time.Duration // if set, a refused acquire says the holder's lease runs this long
	acquires  int           // Acquire calls served
	down      int           // the next this many acquires fail with ErrUnavailable
	waiters   []Waiter      // the Waiter and Next of every acquire, as asked
}

func newMem() *memBackend { return &memBackend{held: map[string]string{}} }

func (m *memBackend) Acquire(_ context.Context, key string, h Hold) (Grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acquires++
	for _, w := range []*Waiter{h.Waiter, h.Next} {
		if w != nil {
			m.waiters = append(m.waiters, *w)
		}
	}
	if m.down > 0 {
		m.down--
		return Grant{}, fmt.Errorf("%w: connection lost", ErrUnavailable)
	}
	if t, ok := m.held[key]; ok && t != h.Token {
		if m.busyFor > 0 {
			return Grant{}, &BusyError{RetryAfter: m.busyFor}
		}
		return Grant{}, ErrNotAcquired
	}
	m.held[key] = h.Token
	m.fence++
	return Grant{Token: h.Token, Fence: m.fence, Validity: h.TTL}, nil
}

func (m *memBackend) Extend(_ context.Context, key, token string, ttl time.Duration, _ Mode) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.extends++
	if m.extendErr != nil {
		return 0, m.extendErr
	}
	if m.held[key] != token {
		return 0, ErrNotHeld
	}
	return ttl, nil
}

func (m *memBackend) Release(_ context.Context, key, token string, _ []Waiter, _ func()) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[key] != token {
		return false, nil
	}
	delete(m.held, key)
	m.released = append(m.released, key)
	return true, nil
}

func (m *memBackend) Inspect(context.Context, string) (Holder, bool, error) {
	return Holder{}, false, nil
}
func (m *memBackend) Leave(context.Context, string, string) error { return nil }
func (m *memBackend) Close() error                                { return nil }

func (m *memBackend) snapshot() (extends int, held int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.extends, len(m.held)
}

func (m *memBackend) set(f func(m *memBackend)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

func newEngine(b Backend) *Engine {
	return mustNew(b, Config{BoundLease: 90 * time.Millisecond, RenewEvery: 10 * time.Millisecond})
}

// mustNew is New over a backend that is already built.
func mustNew(b Backend, cfg Config) *Engine {
	e, err := New(func(Events) (Backend, error) { return b, nil }, cfg, zap.NewNop())
	if err != nil {
		panic(err)
	}
	return e
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for " + what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBoundLockIsRenewedAndReleasedOnClose(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	o := e.NewOwner(1)
	g, err := e.Lock(context.Background(), o, "k", Hold{})
	if err != nil || g.Token == "" {
		t.Fatal(g, err)
	}
	waitFor(t, "three renewals", func() bool { n, _ := m.snapshot(); return n >= 3 })
	if e.BoundHeld() != 1 || e.Stats().Renewals.Load() < 3 {
		t.Fatalf("held %d renewals %d", e.BoundHeld(), e.Stats().Renewals.Load())
	}
	if err := o.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, held := m.snapshot(); held != 0 || e.BoundHeld() != 0 {
		t.Fatalf("after close: %d held upstream, %d kept", held, e.BoundHeld())
	}
	n, _ := m.snapshot()
	time.Sleep(50 * time.Millisecond)
	if after, _ := m.snapshot(); after != n {
		t.Fatalf("renewals went on after close: %d -> %d", n, after)
	}
}

// TestLostLockIsReportedOnce: when a renewal finds the lock gone, the
// engine stops renewing, counts it, and the holder's next UNLOCK says so
// once; the one after that is an ordinary "not held".
func TestLostLockIsReportedOnce(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	o := e.NewOwner(1)
	ctx := context.Background()
	g, err := e.Lock(ctx, o, "k", Hold{})
	if err != nil {
		t.Fatal(err)
	}
	m.set(func(m *memBackend) { delete(m.held, "k") }) // expired upstream behind our back
	waitFor(t, "the loss to be noticed", func() bool { return e.Stats().Lost.Load() == 1 })
	if e.BoundHeld() != 0 {
		t.Fatal("still renewing a lost lock")
	}
	if _, err := e.Renew(ctx, "k", g.Token, 0); !errors.Is(err, ErrLost) {
		t.Fatalf("RENEW after loss: %v", err)
	}
	if ok, err := e.Unlock(ctx, "k", g.Token); ok || err != nil {
		t.Fatalf("second report: %v %v", ok, err)
	}
}

// TestTransientRenewalErrorsRetryUntilValidityRunsOut: errors other than
// "not held" are retried while the lease lasts, then the lock is lost.
func TestTransientRenewalErrorsRetryUntilValidityRunsOut(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	o := e.NewOwner(1)
	g, err := e.Lock(context.Background(), o, "k", Hold{})
	if err != nil {
		t.Fatal(err)
	}
	m.set(func(m *memBackend) { m.extendErr = errors.New("no quorum") })
	waitFor(t, "the loss", func() bool { return e.Stats().Lost.Load() == 1 })
	if f := e.Stats().RenewFailures.Load(); f < 2 {
		t.Fatalf("%d failures: no retry before giving up", f)
	}
	if ok, err := e.Unlock(context.Background(), "k", g.Token); ok || !errors.Is(err, ErrLost) {
		t.Fatalf("UNLOCK after loss: %v %v", ok, err)
	}
}

func TestLeaseIsNotWatched(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	o := e.NewOwner(1)
	if _, err := e.Lock(context.Background(), o, "k", Hold{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	o.Close(context.Background())
	if _, held := m.snapshot(); held != 1 {
		t.Fatal("a lease was released with its connection")
	}
	if n, _ := m.snapshot(); n != 0 {
		t.Fatalf("a lease was renewed %d times", n)
	}
}

func TestShutdownRefusesNewLocksAndReleasesBound(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	o := e.NewOwner(1)
	if _, err := e.Lock(context.Background(), o, "k", Hold{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, held := m.snapshot(); held != 0 {
		t.Fatal("bound lock kept after shutdown")
	}
	if _, err := e.Lock(context.Background(), o, "k2", Hold{}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("lock during shutdown: %v", err)
	}
}

// TestLostFromTheBackend: a backend's Lost report stops a bound lock's
// renewal and answers the holder's next UNLOCK, or a lease holder's next
// RENEW, with ErrLost once; both are counted.
func TestLostFromTheBackend(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	bg := context.Background()
	o := e.NewOwner(1)
	bound, err := e.Lock(bg, o, "b", Hold{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := e.Lock(bg, o, "l", Hold{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.Lost("b", bound.Token)
	e.Lost("l", lease.Token)
	if e.BoundHeld() != 0 {
		t.Fatalf("the lost bound lock is still renewed: %d bound", e.BoundHeld())
	}
	if _, err := e.Unlock(bg, "b", bound.Token); !errors.Is(err, ErrLost) {
		t.Fatalf("UNLOCK of a lost bound lock: %v, want ErrLost", err)
	}
	if _, err := e.Renew(bg, "l", lease.Token, 0); !errors.Is(err, ErrLost) {
		t.Fatalf("RENEW of a lost lease: %v, want ErrLost", err)
	}
	if _, err := e.Renew(bg, "l", lease.Token, 0); errors.Is(err, ErrLost) {
		t.Fatal("a loss was reported twice")
	}
	if n := e.Stats().Lost.Load(); n != 2 {
		t.Fatalf("lost counted %d times, want 2", n)
	}
}
