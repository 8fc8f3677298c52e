package zookeeper

import (
	"context"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/zktest"
)

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("metric %s not supported", s[0].Name)
	}
	return s[0].Value.Uint64()
}

// TestZooKeeperCycleStartsNoGoroutine: an uncontended acquire and its
// release run their requests on the caller's goroutine, whether the
// caller's ctx has no deadline (a client's connection) or one further off
// than the session timeout (a LOCK ... WAIT, a cleanup step): handing
// each request to a goroutine, and its answer back, costs lockproxy more
// CPU than the request itself at concurrency 1. cycles cycles start fewer
// than cycles/2 goroutines; one per request would be two per cycle.
func TestZooKeeperCycleStartsNoGoroutine(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	const cycles = 40
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"no deadline", func() (context.Context, context.CancelFunc) { return context.WithCancel(t.Context()) }},
		{"deadline past the session timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 2*DefaultSessionTimeout)
		}},
	} {
		key := "cycle-" + tc.name
		cycle := func(i int) {
			t.Helper()
			ctx, cancel := tc.ctx()
			defer cancel()
			token := "t" + strconv.Itoa(i)
			if _, err := z.Acquire(ctx, key, hold(token, time.Minute)); err != nil {
				t.Fatalf("%s: acquire %d: %v", tc.name, i, err)
			}
			if ok, err := z.Release(ctx, key, token, nil, nil); !ok || err != nil {
				t.Fatalf("%s: release %d: %v %v", tc.name, i, ok, err)
			}
		}
		cycle(-1) // makes the key's container
		before := goroutinesCreated(t)
		for i := range cycles {
			cycle(i)
		}
		if n := goroutinesCreated(t) - before; n >= cycles/2 {
			t.Errorf("%s: %d cycles started %d goroutines, want fewer than %d", tc.name, cycles, n, cycles/2)
		}
	}
}

// TestZooKeeperHandoffStartsOneGoroutine: a line of waiters of one
// instance, as in a contended key: each release hands the key to the
// next waiter and makes the place of the one after it in one multi, and
// the waiter takes the key with no request. Per handoff, one goroutine
// sets the watch of the new place on the new lock and waits for it (a
// release through another instance wakes the waiter by it); the multi
// itself runs on the releasing caller's goroutine. handoffs handoffs
// start fewer than 1.5 goroutines each.
func TestZooKeeperHandoffStartsOneGoroutine(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	const handoffs = 30
	key := "handoff-cost"
	token := func(i int) string { return "w" + strconv.Itoa(i) }
	mustGrant(t, z, key, hold(token(0), time.Minute))
	mustBusy(t, z, key, waiterFor(token(1), time.Minute))
	var before uint64
	for i := range handoffs + 1 {
		if i == 1 { // the first handoff made the line as it stays
			before = goroutinesCreated(t)
		}
		next, after := waiterFor(token(i+1), time.Minute), waiterFor(token(i+2), time.Minute)
		releaseThen(t, z, key, token(i), next, after)
		z.mu.Lock()
		_, handed := z.handed[zkLock{key, token(i + 1)}]
		z.mu.Unlock()
		if !handed {
			t.Fatalf("release %d handed the key to nobody", i)
		}
		next.Next = after.Waiter
		g, err := z.Acquire(t.Context(), key, next)
		if err != nil || g.Token != token(i+1) {
			t.Fatalf("handoff %d: %+v %v", i, g, err)
		}
		if z.hasPlace(key, token(i+1)) || !z.hasPlace(key, token(i+2)) {
			t.Fatalf("handoff %d: not taken as handed, or no place made for the next waiter", i)
		}
		lock := z.ownLock(key, token(i+1))
		eventually(t, 10*time.Second, "the next place's watch on the lock", func() bool { return z.watching(lock) })
	}
	n := goroutinesCreated(t) - before
	t.Logf("%d handoffs started %d goroutines", handoffs, n)
	if n >= handoffs*3/2 {
		t.Errorf("%d handoffs started %d goroutines, want fewer than %d", handoffs, n, handoffs*3/2)
	}
}
