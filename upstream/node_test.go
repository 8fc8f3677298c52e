package upstream

import (
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

func TestAcquire(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		check := func(token string, want quorum.Claim) {
			t.Helper()
			got, err := n.Acquire(ctx, "k", hold(token, time.Minute))
			if got.State == quorum.Taken && got.Held > 0 && got.Held <= time.Minute {
				got.Held = 0 // TestAcquireTakenHeld checks it closely
			}
			if err != nil || got != want {
				t.Fatalf("Acquire(%s) = %+v, %v; want %+v", token, got, err, want)
			}
		}
		check("a", quorum.Claim{State: quorum.Acquired, Counter: 1, Fence: 1}) // taking it raises the counter
		check("a", quorum.Claim{State: quorum.Mine, Counter: 1, Fence: 1})
		check("b", quorum.Claim{State: quorum.Taken, Counter: 1})
		if _, err := n.Commit(ctx, "k", "a", 7); err != nil {
			t.Fatal(err)
		}
		check("a", quorum.Claim{State: quorum.Mine, Counter: 7, Fence: 7})
		check("b", quorum.Claim{State: quorum.Taken, Counter: 7})
	})
}

// TestAcquireTakenHeld: an acquire that finds the key taken reports how long
// the holder's lease still runs on the node, and no fence.
func TestAcquireTakenHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		const ttl = 10 * time.Second
		start := time.Now()
		mustAcquire(t, n, "k", hold("a", ttl))
		c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
		elapsed := time.Since(start)
		if err != nil || c.State != quorum.Taken || c.Counter != 1 || c.Fence != 0 {
			t.Fatalf("Acquire of a taken key = %+v, %v", c, err)
		}
		// PTTL counts down from ttl in whole ms: at most ttl, and no less
		// than ttl minus the time since the acquire and a rounding ms.
		if c.Held > ttl || c.Held < ttl-elapsed-time.Millisecond {
			t.Errorf("Held = %v, want in [%v, %v]", c.Held, ttl-elapsed-time.Millisecond, ttl)
		}
		mustAcquire(t, n, "short", hold("a", 50*time.Millisecond))
		counter := int64(2)
		eventually(t, 5*time.Second, "Held counts down", func() bool {
			c, err := n.Acquire(ctx, "short", hold("b", time.Minute))
			if err == nil && c.State == quorum.Acquired {
				counter++ // short had run out: b took it (a slow machine)
			}
			return err == nil && (c.State == quorum.Acquired || c.Held < 40*time.Millisecond)
		})
		// The holder's own acquire still reports its fence, not a PTTL.
		// The counter is the node's: raised by short's grants since.
		if c, err := n.Acquire(ctx, "k", hold("a", ttl)); err != nil || c != (quorum.Claim{State: quorum.Mine, Counter: counter, Fence: 1}) {
			t.Errorf("Acquire by the holder = %+v, %v", c, err)
		}
	})
}

func TestAcquireMineResetsTTLAndMode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("a", time.Second))
		h := engine.Hold{Token: "a", TTL: time.Hour, Mode: engine.Bound, Name: "renamed"}
		if c, err := n.Acquire(ctx, "k", h); err != nil || c.State != quorum.Mine {
			t.Fatalf("Acquire again = %+v, %v", c, err)
		}
		e := mustInspect(t, n, "k")
		if e.TTL <= time.Minute || e.Mode != engine.Bound || e.Name != "renamed" {
			t.Errorf("entry after re-acquire = %+v", e)
		}
	})
}

func TestCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		commit := func(token string, fence int64, want bool) {
			t.Helper()
			if held, err := n.Commit(ctx, "k", token, fence); err != nil || held != want {
				t.Fatalf("Commit(%s, %d) = %v, %v; want %v", token, fence, held, err, want)
			}
		}
		commit("a", 3, true)
		if e := mustInspect(t, n, "k"); e.Fence != 3 {
			t.Errorf("fence after commit = %d, want 3", e.Fence)
		}
		commit("b", 9, false) // raises the counter, records nothing
		if e := mustInspect(t, n, "k"); e.Fence != 3 || e.Token != "a" {
			t.Errorf("entry after a stranger's commit = %+v", e)
		}
		commit("a", 5, true) // never lowers the counter
		if got := counter(t, n, "k"); got != 9 {
			t.Errorf("counter = %d, want 9", got)
		}
	})
}

func TestCounterOutlivesLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		if _, err := n.Commit(ctx, "k", "a", 4); err != nil {
			t.Fatal(err)
		}
		mustRelease(t, n, "k", "a", true)
		c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
		if err != nil || c != (quorum.Claim{State: quorum.Acquired, Counter: 5, Fence: 5}) {
			t.Fatalf("Acquire after release = %+v, %v", c, err)
		}
	})
}

func TestExtend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("a", time.Second))
		extend := func(token string, mode engine.Mode, want bool) {
			t.Helper()
			if ttl, err := n.Extend(ctx, "k", token, time.Hour, mode); err != nil || (ttl == time.Hour) != want {
				t.Fatalf("Extend(%s, %q) = %v, %v; want %v", token, mode, ttl, err, want)
			}
		}
		extend("b", engine.Bound, false)
		if e := mustInspect(t, n, "k"); e.TTL > time.Second || e.Mode != engine.Lease {
			t.Errorf("a stranger's extend changed the entry: %+v", e)
		}
		// The watchdog's renewal (mode bound) of a lock that became a lease
		// is refused, and changes nothing.
		if ttl, err := n.Extend(ctx, "k", "a", time.Hour, engine.Bound); err != nil || ttl >= 0 {
			t.Fatalf("bound renewal of a lease = %v, %v; want a negative ttl", ttl, err)
		}
		if e := mustInspect(t, n, "k"); e.TTL > time.Second || e.Mode != engine.Lease {
			t.Errorf("a refused bound renewal changed the entry: %+v", e)
		}
		extend("a", engine.Lease, true)
		if e := mustInspect(t, n, "k"); e.TTL <= time.Minute || e.Mode != engine.Lease {
			t.Errorf("entry after extend = %+v", e)
		}
		extend("a", "", true) // an empty mode keeps the mode
		if e := mustInspect(t, n, "k"); e.Mode != engine.Lease {
			t.Errorf("mode after extend without mode = %q", e.Mode)
		}
		if ttl, err := n.Extend(ctx, "free", "a", time.Hour, ""); err != nil || ttl != 0 {
			t.Errorf("Extend of a free key = %v, %v", ttl, err)
		}
		// A zero ttl reuses the lock's own: the last one set, an hour.
		if ttl, err := n.Extend(ctx, "k", "a", 0, ""); err != nil || ttl != time.Hour {
			t.Errorf("Extend with the lock's own ttl = %v, %v", ttl, err)
		}
		mustAcquire(t, n, "k2", hold("a", 1500*time.Millisecond))
		if ttl, err := n.Extend(ctx, "k2", "a", 0, ""); err != nil || ttl != 1500*time.Millisecond {
			t.Errorf("Extend with the acquire's ttl = %v, %v", ttl, err)
		}
	})
}

func TestRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n := newNode(t, RedisOptions{Addr: addr})
		mustAcquire(t, n, "k", hold("a", time.Minute))
		mustRelease(t, n, "k", "b", false)
		mustInspect(t, n, "k")
		mustRelease(t, n, "k", "a", true)
		mustRelease(t, n, "k", "a", false)
		if _, ok, err := n.Inspect(testCtx(t), "k"); err != nil || ok {
			t.Errorf("Inspect after release: ok=%v err=%v", ok, err)
		}
	})
}

func TestInspect(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		if e, ok, err := n.Inspect(ctx, "k"); err != nil || ok || e != (quorum.Entry{}) {
			t.Fatalf("Inspect of a free key = %+v, %v, %v", e, ok, err)
		}
		mustAcquire(t, n, "k", engine.Hold{Token: "a", TTL: time.Minute, Mode: engine.Bound, Name: "worker-1"})
		e := mustInspect(t, n, "k")
		if e.TTL <= 0 || e.TTL > time.Minute {
			t.Errorf("TTL = %v, want in (0, 1m]", e.TTL)
		}
		e.TTL = 0
		if want := (quorum.Entry{Token: "a", Fence: 1, Mode: engine.Bound, Name: "worker-1"}); e != want {
			t.Errorf("Inspect = %+v, want %+v", e, want)
		}
	})
}

func TestExpiry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("a", 50*time.Millisecond))
		if _, err := n.Commit(ctx, "k", "a", 2); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "lock expired", func() bool {
			_, ok, err := n.Inspect(ctx, "k")
			return err == nil && !ok
		})
		c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
		if err != nil || c != (quorum.Claim{State: quorum.Acquired, Counter: 3, Fence: 3}) {
			t.Fatalf("Acquire after expiry = %+v, %v", c, err)
		}
	})
}

// TestKeyLayout: the lock key is the client's key, a string holding the
// token with the lease's TTL, as SET k a NX PX 60000 leaves it on one Redis;
// the holder's bookkeeping is a meta string beside it with the same TTL, and
// the node's one fencing counter is kept for ever: nothing of the key's.
func TestKeyLayout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "k", engine.Hold{Token: "a", TTL: time.Minute, Mode: engine.Lease, Name: "w"})
		if _, err := n.Commit(ctx, "k", "a", 5); err != nil {
			t.Fatal(err)
		}
		if v, typ, ttl := raw.Get(ctx, "k").Val(), raw.Type(ctx, "k").Val(), raw.PTTL(ctx, "k").Val(); v != "a" || typ != "string" || ttl <= 0 || ttl > time.Minute {
			t.Errorf("lock key k = %q (%s) with PTTL %v, want \"a\" (string) with (0, 1m]", v, typ, ttl)
		}
		if typ := raw.Type(ctx, "lockproxy:meta:k").Val(); typ != "string" {
			t.Errorf("meta is a %s, want a string", typ)
		}
		got, err := readMeta(ctx, raw, "k")
		want := map[string]string{"token": "a", "fence": "5", "mode": "lease", "name": "w", "ttl": "60000", "attempt": "", "took": "1", "lined": "0"}
		if err != nil || len(got) != len(want) {
			t.Fatalf("meta = %v, %v; want %v", got, err, want)
		}
		for f, v := range want {
			if got[f] != v {
				t.Errorf("field %s = %q, want %q", f, got[f], v)
			}
		}
		if ttl := raw.PTTL(ctx, "lockproxy:meta:k").Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("meta PTTL = %v, want (0, 1m]", ttl)
		}
		layout, err := raw.Get(ctx, "lockproxy:layout").Result()
		if ttl := raw.PTTL(ctx, "lockproxy:layout").Val(); err != nil || layout != "5" || ttl != -1 {
			t.Errorf("layout key = %q, %v with PTTL %v, want the counter 5 (a string: layout 3) with none", layout, err, ttl)
		}
		for _, k := range []string{"lockproxy:fence-floor", "lockproxy:fence-max"} {
			if typ := raw.Type(ctx, k).Val(); typ != "hash" {
				t.Errorf("%s is a %s, want a hash (layout 1's GET of it must fail)", k, typ)
			}
		}
		mustRelease(t, n, "k", "a", true)
		if got := raw.Exists(ctx, "k").Val(); got != 0 {
			t.Errorf("the lock key left after the release")
		}
		// Nothing of k's is left but its meta, for the rest of its TTL (the
		// lease plus the grace, none here: quorum.Op.MetaFor), so that an
		// extension landing after the release heals nothing (extend.lua);
		// then only the node's own keys.
		if ttl := raw.PTTL(ctx, "lockproxy:meta:k").Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("meta PTTL after the release = %v, want the rest of its (0, 1m]", ttl)
		}
		if keys := raw.Keys(ctx, "*").Val(); len(keys) != 4 {
			t.Errorf("keys left after the release: %v, want k's meta, the layout key, fence-floor and fence-max", keys)
		}
	})
}

func TestPrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr, Prefix: "x/"}), testCtx(t)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		raw := rawClient(t, addr)
		if got := raw.Exists(ctx, "k", "x/meta:k", "x/layout").Val(); got != 3 {
			t.Errorf("EXISTS k x/meta:k x/layout = %d, want 3", got)
		}
		if got := raw.Exists(ctx, "lockproxy:meta:k", "lockproxy:layout").Val(); got != 0 {
			t.Errorf("%d keys under the default prefix", got)
		}
	})
}

func mustAcquire(t *testing.T, n *RedisNode, key string, h engine.Hold) {
	t.Helper()
	c, err := n.Acquire(testCtx(t), key, h)
	if err != nil || c.State != quorum.Acquired {
		t.Fatalf("Acquire(%s, %s) = %+v, %v; want acquired", key, h.Token, c, err)
	}
}

func mustRelease(t *testing.T, n *RedisNode, key, token string, want bool) {
	t.Helper()
	if ok, err := n.Release(testCtx(t), key, token); err != nil || ok != want {
		t.Fatalf("Release(%s, %s) = %v, %v; want %v", key, token, ok, err, want)
	}
}

// releaseBound runs a release of key by token on n bound to attempt (a
// rollback if rollback); the node must answer it.
func releaseBound(t *testing.T, n *RedisNode, key, token, attempt string, rollback bool) quorum.Reply {
	t.Helper()
	r := n.do(testCtx(t), &quorum.Op{Kind: quorum.OpRelease, Key: key, Token: token, Attempt: attempt, Rollback: rollback})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r
}

func mustInspect(t *testing.T, n *RedisNode, key string) quorum.Entry {
	t.Helper()
	e, ok, err := n.Inspect(testCtx(t), key)
	if err != nil || !ok {
		t.Fatalf("Inspect(%s) = %v, %v; want held", key, ok, err)
	}
	return e
}

// counter reads the key's fencing counter through an acquire that fails.
func counter(t *testing.T, n *RedisNode, key string) int64 {
	t.Helper()
	c, err := n.Acquire(testCtx(t), key, hold("counter-reader", time.Minute))
	if err != nil || c.State != quorum.Taken {
		t.Fatalf("reading the counter: %+v, %v", c, err)
	}
	return c.Counter
}

// TestNothingOutlivesTheLease: once a lease ends, nothing of its key is
// left on the node (layout 1 kept the key's fencing counter for ever), and
// the key's next grant still gets a higher fence, from the node's counter.
func TestNothingOutlivesTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		first, err := n.Acquire(ctx, "k", hold("a", 50*time.Millisecond))
		if err != nil || first.State != quorum.Acquired {
			t.Fatalf("Acquire = %+v, %v", first, err)
		}
		// Redis expires a key when it is read, or within about a second.
		eventually(t, 5*time.Second, "k's lease and bookkeeping expire", func() bool {
			keys := raw.Keys(ctx, "*").Val()
			slices.Sort(keys)
			return slices.Equal(keys, []string{"lockproxy:fence-floor", "lockproxy:fence-max", "lockproxy:layout"})
		})
		again, err := n.Acquire(ctx, "k", hold("b", time.Minute))
		if err != nil || again.State != quorum.Acquired || again.Fence <= first.Fence {
			t.Errorf("Acquire after the lease = %+v, %v; want a fence above %d", again, err, first.Fence)
		}
	})
}
