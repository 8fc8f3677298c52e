package engine

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkLeaseCycle is the engine's own cost of a lease's LOCK and
// UNLOCK over a backend that costs almost nothing: what the engine adds to
// every lock cycle (bookkeeping for LOCKPROXY LOCKS and lost-lock notices).
func BenchmarkLeaseCycle(b *testing.B) {
	benchCycle(b, newEngine(&cheapBackend{held: map[string]string{}}), 1024, Hold{TTL: time.Minute})
}

// BenchmarkBoundCycle is BenchmarkLeaseCycle for connection-bound locks:
// the engine's cost of starting and stopping the watchdog of each grant.
func BenchmarkBoundCycle(b *testing.B) {
	e := mustNew(&cheapBackend{held: map[string]string{}}, Config{BoundLease: time.Minute})
	benchCycle(b, e, 1024, Hold{})
}

// BenchmarkLeaseDistinctKeys is BenchmarkLeaseCycle over so many keys
// that each is locked once in a long while, as an application that locks
// per order or per user does.
func BenchmarkLeaseDistinctKeys(b *testing.B) {
	benchCycle(b, newEngine(&cheapBackend{held: map[string]string{}}), 1<<18, Hold{TTL: time.Minute})
}

// benchCycle locks and unlocks n keys in turn with h from parallel clients.
func benchCycle(b *testing.B, e *Engine, n int, h Hold) {
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		o := e.NewOwner(1)
		i := 0
		for pb.Next() {
			i++
			key := keys[i%len(keys)]
			g, err := e.Lock(ctx, o, key, h)
			if err != nil {
				continue // another goroutine holds this key now
			}
			if _, err := e.Unlock(ctx, key, g.Token); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// cheapBackend holds locks in a map and remembers nothing else, so that a
// benchmark measures the engine rather than its backend.
type cheapBackend struct {
	mu    sync.Mutex
	held  map[string]string
	fence int64
}

func (c *cheapBackend) Acquire(_ context.Context, key string, h Hold) (Grant, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.held[key]; ok && t != h.Token {
		return Grant{}, ErrNotAcquired
	}
	c.held[key] = h.Token
	c.fence++
	return Grant{Token: h.Token, Fence: c.fence, Validity: h.TTL}, nil
}

func (c *cheapBackend) Extend(_ context.Context, key, token string, ttl time.Duration, _ Mode) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[key] != token {
		return 0, ErrNotHeld
	}
	return ttl, nil
}

func (c *cheapBackend) Release(_ context.Context, key, token string, _ []Waiter, sent func()) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[key] != token {
		return false, nil
	}
	delete(c.held, key)
	if sent != nil {
		sent()
	}
	return true, nil
}

func (c *cheapBackend) Inspect(context.Context, string) (Holder, bool, error) {
	return Holder{}, false, nil
}
func (c *cheapBackend) Leave(context.Context, string, string) error { return nil }
func (c *cheapBackend) Close() error                                { return nil }
