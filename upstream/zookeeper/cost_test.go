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
