package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestNodeStateAgainstRedis checks bar 8's measure and its constant on a
// real redis-server, with plain SET NX PX straight to it (what a lock that
// leaves nothing behind its lease does): 20,000 keys whose leases ended
// are back within the constant; keys that outlive the wait are not, and
// lockproxy:* keys are counted apart.
func TestNodeStateAgainstRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	clients := []*redis.Client{c}
	if err := c.Set(ctx, "lockproxy:layout", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := readNodes(ctx, clients)
	if start[0].err != nil || start[0].keys != 1 || start[0].lpKeys != 1 || start[0].memory <= 0 {
		t.Fatalf("start: %+v", start[0])
	}
	const n, lease = 20_000, 200 * time.Millisecond
	r := fill(ctx, srv.Addr(), "bench:test:k", n, lease, time.Minute)
	if r.locked != n || r.refused != 0 || r.errors != 0 {
		t.Fatalf("fill: %v", r)
	}
	end, back := awaitSlack(ctx, clients, start, time.Now().Add(lease), time.Minute)
	if back < 0 {
		t.Fatalf("%d expired keys: not back within the constant: start %+v, end %+v", n, start[0], end[0])
	}
	t.Logf("%d keys: start %+v, end %+v, back %v after the leases", n, start[0], end[0], back)

	// Keys that outlive their lease by more than the wait.
	if r := fill(ctx, srv.Addr(), "lockproxy:fence:k", 100, time.Hour, time.Minute); r.locked != 100 {
		t.Fatalf("fill: %v", r)
	}
	end, back = awaitSlack(ctx, clients, start, time.Now(), 0)
	if back >= 0 || withinSlack(start, end) {
		t.Fatalf("100 keys left: back %v, start %+v, end %+v", back, start[0], end[0])
	}
	// (a few expired keys may not have been removed yet)
	if k, _ := (stateRun{start: start, end: end}).growth(0); k < 100 || k > 100+stateKeySlack || end[0].lpKeys != 101 {
		t.Fatalf("100 keys left: growth %d keys, %d lockproxy:* keys", k, end[0].lpKeys)
	}
}

// TestWorkerFreshKeys: with spec.fresh, every cycle is on a key no cycle
// used before.
func TestWorkerFreshKeys(t *testing.T) {
	seen := map[string]bool{}
	cycle := func(_ context.Context, key string) (time.Duration, error) {
		if seen[key] {
			t.Errorf("key %q used twice", key)
		}
		seen[key] = true
		return 0, nil
	}
	workers := newWorkers("x", spec{conc: 1, samples: 10, timeout: time.Second, phase: "run", fresh: true})
	var budget atomic.Int64
	budget.Store(3 * keysPerWorker)
	workers[0].loop(context.Background(), cycle, &budget, time.Now().Add(time.Minute))
	if len(seen) != 3*keysPerWorker {
		t.Fatalf("%d distinct keys in %d cycles", len(seen), 3*keysPerWorker)
	}
}
