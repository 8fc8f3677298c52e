package instance_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestAttackLeanWakeAfterMetaRewrites: node layout 3's release skips the
// look at the key's line where the hold's meta says nobody took a place
// since its grant. A waiter of another instance, queued while the holder's
// meta is rewritten on every node (a RENEW with a new lease, a retry of
// LOCK ... TOKEN, a RENEW after the meta was lost on every node), before
// or after the rewrite, gets the lock as soon as the holder UNLOCKs: long
// before the holder's ten-minute lease, and before its own WAIT ends
// (its retry, not woken, would come after a third of its two-minute keep).
func TestAttackLeanWakeAfterMetaRewrites(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	// A waiter that is not woken tries again only after a third of its
	// keep (engine.retryAfter): past the test's patience, and past its WAIT.
	cfg.Locks.WaiterKeepMS = 120000
	one, two := startInstance(t, cfg), startInstance(t, cfg)
	h, w := newClient(t, one.Addr(), 2), newClient(t, two.Addr(), 2)
	raws := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		raws[i] = redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		t.Cleanup(func() { raws[i].Close() })
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		waiterFirst bool
		lostMeta    bool
		rewrite     func(key, token string) error
	}{
		{"renew", true, false, func(key, token string) error { return h.Do(ctx, "RENEW", key, token, "PX", 600000).Err() }},
		{"renew first", false, false, func(key, token string) error { return h.Do(ctx, "RENEW", key, token, "PX", 600000).Err() }},
		{"relock", true, false, func(key, token string) error {
			_, _, err := lock(ctx, h, key, "PX", 600000, "TOKEN", token)
			return err
		}},
		{"relock first", false, false, func(key, token string) error {
			_, _, err := lock(ctx, h, key, "PX", 600000, "TOKEN", token)
			return err
		}},
		{"renew after the meta was lost", true, true, func(key, token string) error { return h.Do(ctx, "RENEW", key, token, "PX", 600000).Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			g := mustLock(t, h, key, "PX", 600000)
			for _, r := range raws { // the grant's meta, on every node, says nobody waits
				eventually(t, 10*time.Second, "the grant on every node", func() bool {
					return r.Exists(ctx, "lockproxy:meta:"+key).Val() == 1
				})
			}
			if tc.lostMeta {
				for _, r := range raws {
					r.Del(ctx, "lockproxy:meta:"+key)
				}
			}
			var got <-chan lockResult
			queue := func() {
				got = waitLock(w, key, "PX", 5000, "WAIT", 30000)
				eventually(t, 10*time.Second, "the waiter is queued", func() bool { return waiters(t, w, key) == 1 })
				for _, r := range raws { // and placed in line on every node
					eventually(t, 10*time.Second, "the waiter's place on every node", func() bool {
						return r.ZCard(ctx, "lockproxy:line:"+key).Val() == 1
					})
				}
			}
			if tc.waiterFirst {
				queue()
			}
			if err := tc.rewrite(key, g.token); err != nil {
				t.Fatal(err)
			}
			if !tc.waiterFirst {
				queue()
			}
			if n, err := h.Do(ctx, "UNLOCK", key, g.token).Int(); err != nil || n != 1 {
				t.Fatalf("UNLOCK = %d, %v", n, err)
			}
			if r := recv(t, got, 20*time.Second, "the waiter after the release"); r.fence <= g.fence {
				t.Fatalf("fence %d after %d", r.fence, g.fence)
			}
		})
	}
}
