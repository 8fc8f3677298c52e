package instance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
)

// Issue 12.7: lock-delay. A connection-bound holder that vanishes without
// releasing keeps the key from everyone for the key's lock-delay; then a
// waiter gets it. Off by default.

// lockinfoMode is LOCKINFO's mode of key ("bound", "lease"), or "free".
func lockinfoMode(t *testing.T, c *rawConn, key string) string {
	t.Helper()
	r := c.do("LOCKINFO", key)
	if r == "(nil)" {
		return "free"
	}
	f := strings.Fields(strings.Trim(r, "[]"))
	for i := 0; i+1 < len(f); i += 2 {
		if f[i] == "mode" {
			return f[i+1]
		}
	}
	t.Fatalf("LOCKINFO %s: %s", key, r)
	return ""
}

// TestLockDelay: keys matching a lock_delay pattern are kept as a lease of
// the delay when their holder's connection closes: refused meanwhile, then
// granted to a waiter. The bound lease is a minute, so a grant within the
// test's patience can only come from the delay's end, not the lease's.
func TestLockDelay(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		cfg.Locks.BoundLeaseMS = 60000
		cfg.Locks.LockDelay = []instance.LockDelayConfig{{Keys: "*:delayed", MS: 1500}}
		in := startInstance(t, cfg)
		key := uniqueKey(t) + ":delayed"
		holder := dialRaw(t, in.Addr())
		held := parseGrant(t, holder.do("LOCK", key))
		other := dialRaw(t, in.Addr())

		holder.c.Close() // vanishes without UNLOCK
		eventually(t, 10*time.Second, "the lock kept as a lease of the delay", func() bool {
			switch m := lockinfoMode(t, other, key); m {
			case "lease":
				return true
			case "free":
				t.Fatal("released at once: no lock-delay")
			}
			return false
		})
		if r := other.do("LOCK", key, "PX", "10000"); r != "(nil)" {
			t.Fatalf("LOCK during the lock-delay: %s, want (nil)", r)
		}
		r := other.do("LOCK", key, "PX", "10000", "WAIT", "30000")
		if g := parseGrant(t, r); g.fence <= held.fence {
			t.Fatalf("fence %d after %d", g.fence, held.fence)
		}
		if r := other.do("INFO", "locks"); !strings.Contains(r, "locks_delayed:1") {
			t.Fatalf("INFO locks:\n%s", r)
		}
	})
}

// TestLockDelayOffByDefault: without lock_delay settings a vanished
// holder's lock is released at once: a waiter gets it long before the
// minute-long bound lease could end; a key no pattern matches likewise.
func TestLockDelayOffByDefault(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		cfg.Locks.BoundLeaseMS = 60000
		for _, rules := range [][]instance.LockDelayConfig{nil, {{Keys: "other:*", MS: 60000}}} {
			cfg.Locks.LockDelay = rules
			in := startInstance(t, cfg)
			key := uniqueKey(t)
			holder := dialRaw(t, in.Addr())
			held := parseGrant(t, holder.do("LOCK", key))
			got := waitLock(newClient(t, in.Addr(), 3), key, "PX", 10000, "WAIT", 30000)
			info := newClient(t, in.Addr(), 3)
			eventually(t, 10*time.Second, "the waiter queued", func() bool { return waiters(t, info, key) == 1 })
			holder.c.Close()
			if g := recv(t, got, 40*time.Second, "the waiter after the holder vanished"); g.fence <= held.fence {
				t.Fatalf("fence %d after %d", g.fence, held.fence)
			}
		}
	})
}
