package instance_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestPassthroughLockKeysGlobClasses: lock_keys = ["lock:[ab]*"] takes
// the keys a plain redis-server's KEYS lock:[ab]* names (checked first) as
// locks — SET lock:a1 NX is held on the lock nodes and LOCKINFO knows it —
// and leaves the others to the data Redis. Issue 27 §4.
func TestPassthroughLockKeysGlobClasses(t *testing.T) {
	ctx := context.Background()
	plain := newClient(t, redistest.Start(t, redistest.Options{}).Addr(), 2)
	for _, k := range []string{"lock:a1", "lock:b1", "lock:c1"} {
		plain.Set(ctx, k, "t", 0)
	}
	if got, _ := plain.Keys(ctx, "lock:[ab]*").Result(); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"lock:a1", "lock:b1"}) {
		t.Fatalf("plain Redis: KEYS lock:[ab]* = %q", got)
	}
	p := startPassthrough(t, "lock:[ab]*")
	c := newClient(t, p.in.Addr(), 2)
	data := newClient(t, p.data.Addr(), 2)
	for _, k := range []string{"lock:a1", "lock:b1", "lock:c1"} {
		if ok, err := c.SetNX(ctx, k, "t", 10*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET %s NX: %v, %v", k, ok, err)
		}
	}
	for _, k := range []string{"lock:a1", "lock:b1"} {
		if n := p.onLockNodes(k); n < 2 {
			t.Errorf("%s is on %d lock nodes, want a majority", k, n)
		}
		if data.Exists(ctx, k).Val() != 0 {
			t.Errorf("%s went to the data Redis", k)
		}
		if v, err := c.Do(ctx, "LOCKINFO", k).Result(); err != nil || v == nil {
			t.Errorf("LOCKINFO %s = %v, %v: not a lock", k, v, err)
		}
	}
	if data.Exists(ctx, "lock:c1").Val() != 1 || p.onLockNodes("lock:c1") != 0 {
		t.Errorf("lock:c1 does not match lock:[ab]*: it belongs on the data Redis")
	}
}
