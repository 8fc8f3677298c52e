package upstream

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestForeignValue: a lock key that holds something lockproxy did not
// write — a hash, as a Redisson lock script leaves it, or a string — is
// held by somebody else: every script answers it without an error (no
// WRONGTYPE escapes), none takes, renews or deletes it, and Inspect says
// held, with the key's own PTTL.
func TestForeignValue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		if err := raw.HSet(ctx, "h", "8f2c:1", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.PExpire(ctx, "h", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.Set(ctx, "s", "theirs", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.Set(ctx, "p", "persistent", 0).Err(); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"h", "s", "p"} {
			for _, fresh := range []bool{false, true} {
				h := hold("a", time.Minute)
				h.Fresh = fresh
				c, err := n.Acquire(ctx, key, h)
				if err != nil || c.State != quorum.Taken {
					t.Errorf("Acquire(%s, fresh %v) = %+v, %v; want taken", key, fresh, c, err)
				}
			}
			if ttl, err := n.Extend(ctx, key, "a", time.Minute, engine.Lease); err != nil || ttl != 0 {
				t.Errorf("Extend(%s) = %v, %v; want 0", key, ttl, err)
			}
			if ok, err := n.Commit(ctx, key, "a", 9); err != nil || ok {
				t.Errorf("Commit(%s) = %v, %v; want false", key, ok, err)
			}
			mustRelease(t, n, key, "a", false)
		}
		e := mustInspect(t, n, "h")
		if e.Token != "" || e.Fence != 0 || e.Mode != engine.Lease || e.TTL <= 0 || e.TTL > 30*time.Second || e.Type != "hash" {
			t.Errorf("Inspect(hash) = %+v; want token unknown, a lease of at most 30s", e)
		}
		e = mustInspect(t, n, "s")
		if e.Token != "theirs" || e.Fence != 0 || e.Mode != engine.Lease || e.TTL <= 0 || e.TTL > 30*time.Second || e.Type != "" {
			t.Errorf("Inspect(string) = %+v; want \"theirs\", a lease of at most 30s", e)
		}
		if e = mustInspect(t, n, "p"); e.Token != "persistent" || e.Mode != engine.Bound || e.TTL != forever {
			t.Errorf("Inspect(no expiry) = %+v; want held for ever, bound", e)
		}
		if typ := raw.Type(ctx, "h").Val(); typ != "hash" || raw.HGet(ctx, "h", "8f2c:1").Val() != "1" {
			t.Errorf("the hash was changed: type %s", typ)
		}
		if got := raw.Exists(ctx, "lockproxy:meta:h", "lockproxy:meta:s", "lockproxy:meta:p").Val(); got != 0 {
			t.Errorf("%d metas written for keys lockproxy does not hold", got)
		}
	})
}

// TestScriptOnLockKey: a script run on the node (as lockproxy runs unknown
// lock scripts) that reads, extends and deletes a lock key acts on exactly
// the lock: GET reads the token, a PEXPIRE is the lock's TTL from then on,
// even once the meta expired before the key, and a DEL frees the
// key for the next holder though the meta is still there.
func TestScriptOnLockKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "k", engine.Hold{Token: "a", TTL: 200 * time.Millisecond, Mode: engine.Lease, Name: "w"})
		const script = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
		if got, err := raw.Eval(ctx, script, []string{"k"}, "a", 60000).Int(); got != 1 || err != nil {
			t.Fatalf("the script's PEXPIRE = %d, %v", got, err)
		}
		eventually(t, 10*time.Second, "meta expired", func() bool {
			return raw.Exists(ctx, "lockproxy:meta:k").Val() == 0
		})
		e := mustInspect(t, n, "k")
		if e.Token != "a" || e.Mode != engine.Lease || e.TTL <= 50*time.Second || e.TTL > time.Minute {
			t.Errorf("Inspect after the script's PEXPIRE = %+v; want a's lease of the key's PTTL", e)
		}
		if c, err := n.Acquire(ctx, "k", hold("b", time.Minute)); err != nil || c.State != quorum.Taken {
			t.Errorf("Acquire(b) while the script's lease runs = %+v, %v", c, err)
		}
		if ttl, err := n.Extend(ctx, "k", "a", 0, ""); err != nil || ttl <= 50*time.Second || ttl > time.Minute {
			t.Errorf("Extend(a, own ttl) without its meta = %v, %v; want what the key has left", ttl, err)
		}
		if e := mustInspect(t, n, "k"); e.Token != "a" || e.Name != "" {
			t.Errorf("Inspect after the renewal = %+v", e)
		}
		if ok, err := n.Commit(ctx, "k", "a", 4); err != nil || !ok {
			t.Fatalf("Commit(a) = %v, %v", ok, err)
		}
		if e := mustInspect(t, n, "k"); e.Fence != 4 {
			t.Errorf("Inspect after the commit = %+v; want fence 4", e)
		}
		if ttl := raw.PTTL(ctx, "lockproxy:meta:k").Val(); ttl <= 0 {
			t.Errorf("meta rewritten with PTTL %v, want the key's", ttl)
		}
		// The script deletes the key: free, whatever the meta says.
		if got, err := raw.Eval(ctx, "return redis.call('DEL', KEYS[1])", []string{"k"}).Int(); got != 1 || err != nil {
			t.Fatalf("the script's DEL = %d, %v", got, err)
		}
		if raw.Exists(ctx, "lockproxy:meta:k").Val() != 1 {
			t.Fatal("the meta went with the key: the test shows nothing")
		}
		if _, ok, err := n.Inspect(ctx, "k"); ok || err != nil {
			t.Errorf("Inspect after the DEL = %v, %v; want free", ok, err)
		}
		if ttl, err := n.Extend(ctx, "k", "a", time.Minute, ""); ttl != 0 || err != nil {
			t.Errorf("Extend(a) after the DEL = %v, %v; want 0", ttl, err)
		}
		mustRelease(t, n, "k", "a", false)
		c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
		if err != nil || c != (quorum.Claim{State: quorum.Acquired, Counter: 5, Fence: 5}) {
			t.Fatalf("Acquire(b) after the DEL = %+v, %v; want fence 5", c, err)
		}
		if e := mustInspect(t, n, "k"); e.Token != "b" || e.Fence != 5 || e.Name != "client-b" {
			t.Errorf("Inspect(b) = %+v", e)
		}
		if v := raw.Get(ctx, "k").Val(); v != "b" {
			t.Errorf("GET k = %q, want b", v)
		}
	})
}

// TestStaleMeta: a meta that outlived or lost its key makes nobody a
// holder, and a meta of another token lends its fence to nobody: layout
// 3's string, and layout 2's hash, which a node migrating may still hold.
func TestStaleMeta(t *testing.T) {
	for _, kind := range []string{"string", "hash"} {
		t.Run(kind, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, addr string) {
				n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
				m := map[string]string{"token": "a", "fence": "7", "mode": "lease", "name": "w", "ttl": "60000", "attempt": "x", "took": "1"}
				var err error
				if kind == "string" {
					err = raw.Set(ctx, "lockproxy:meta:k", encodeMeta(m), 0).Err()
				} else {
					err = raw.HSet(ctx, "lockproxy:meta:k", m).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, ok, err := n.Inspect(ctx, "k"); ok || err != nil {
					t.Errorf("Inspect with only a meta = %v, %v; want free", ok, err)
				}
				if ttl, err := n.Extend(ctx, "k", "a", time.Minute, ""); ttl != 0 || err != nil {
					t.Errorf("Extend = %v, %v; want 0", ttl, err)
				}
				mustRelease(t, n, "k", "a", false)
				// Someone else's string under the key: the meta is not its.
				if err := raw.Set(ctx, "k", "z", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				if e := mustInspect(t, n, "k"); e.Token != "z" || e.Fence != 0 || e.Name != "" {
					t.Errorf("Inspect = %+v; want z with no fence nor name", e)
				}
				if c, err := n.Acquire(ctx, "k", hold("z", time.Minute)); err != nil || c != (quorum.Claim{State: quorum.Mine, Counter: 0, Fence: 0}) {
					t.Errorf("Acquire(z) = %+v, %v; want mine, with no fence of a's", c, err)
				}
			})
		})
	}
}

// TestReservedKeys: a client's key spelled like lockproxy's bookkeeping is
// moved under <prefix>key:, so that it never overwrites a fencing counter
// or a meta hash; every other key, a SELECTed database's among them, is
// the key itself.
func TestReservedKeys(t *testing.T) {
	n := NewRedisNode(RedisOptions{Addr: "127.0.0.1:1"})
	defer n.Close()
	moved := map[string]bool{}
	for key, want := range map[string]string{
		"k":                      "k",
		"lockproxy:db1:k":        "lockproxy:db1:k",
		"lockproxy:readyz":       "lockproxy:readyz",
		"lockproxy:metadata":     "lockproxy:metadata",
		"lockproxy:fence:k":      "lockproxy:key:lockproxy:fence:k",
		"lockproxy:meta:k":       "lockproxy:key:lockproxy:meta:k",
		"lockproxy:fence-max":    "lockproxy:key:lockproxy:fence-max",
		"lockproxy:vetted":       "lockproxy:key:lockproxy:vetted",
		"lockproxy:vetted-floor": "lockproxy:key:lockproxy:vetted-floor",
		"lockproxy:line:k":       "lockproxy:key:lockproxy:line:k",
		"lockproxy:undone:k":     "lockproxy:key:lockproxy:undone:k",
		"lockproxy:key:x":        "lockproxy:key:lockproxy:key:x",
		"lockproxy:fence-floo":   "lockproxy:fence-floo",
		"lockproxy:layout":       "lockproxy:key:lockproxy:layout",
	} {
		got := n.lockKey(key)
		if got != want {
			t.Errorf("lockKey(%q) = %q, want %q", key, got, want)
		}
		if moved[got] {
			t.Errorf("two keys stored at %q", got)
		}
		moved[got] = true
	}
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		mustAcquire(t, n, "lockproxy:layout", hold("b", time.Minute))
		if v := raw.Get(ctx, "lockproxy:layout").Val(); v != "2" {
			t.Errorf("the node's fencing counter = %q, want 2", v)
		}
		if v := raw.Get(ctx, "lockproxy:key:lockproxy:layout").Val(); v != "b" {
			t.Errorf("the moved lock key holds %q, want b", v)
		}
		mustRelease(t, n, "k", "a", true)
		if c, err := n.Acquire(ctx, "k", hold("c", time.Minute)); err != nil || c.Fence != 3 {
			t.Errorf("Acquire(k) = %+v, %v; want fence 3", c, err)
		}
	})
}

// TestMetaAnyBytes: the meta, one string, keeps any bytes of a token, a
// name and a mode (colons, digits, NUL, bytes that are no UTF-8), through
// an acquire, a commit, a renewal that changes the mode and a refresh,
// and the release finds the hold by it.
func TestMetaAnyBytes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		token, name := "3:ab1:\x00\xff:", "12:\xfe\x00x:9:"
		h := engine.Hold{Token: token, TTL: time.Minute, Mode: engine.Bound, Name: name}
		c, err := n.Acquire(ctx, "k", h)
		if err != nil || c.State != quorum.Acquired {
			t.Fatalf("Acquire = %+v, %v", c, err)
		}
		check := func(when string, mode engine.Mode, fence int64) {
			t.Helper()
			e := mustInspect(t, n, "k")
			if e.Token != token || e.Name != name || e.Mode != mode || e.Fence != fence {
				t.Errorf("Inspect %s = %+v; want %q named %q, %s, fence %d", when, e, token, name, mode, fence)
			}
			m, err := readMeta(ctx, raw, "k")
			if err != nil || m["token"] != token || m["name"] != name || m["ttl"] != "60000" {
				t.Errorf("meta %s = %q, %v", when, m, err)
			}
		}
		check("after the acquire", engine.Bound, c.Fence)
		if ok, err := n.Commit(ctx, "k", token, c.Fence+10); err != nil || !ok {
			t.Fatalf("Commit = %v, %v", ok, err)
		}
		check("after the commit", engine.Bound, c.Fence+10)
		if ttl, err := n.Extend(ctx, "k", token, 0, engine.Lease); err != nil || ttl != time.Minute {
			t.Fatalf("Extend = %v, %v", ttl, err)
		}
		check("after the renewal", engine.Lease, c.Fence+10)
		if r, err := n.Acquire(ctx, "k", h); err != nil || r.State != quorum.Mine || r.Fence != c.Fence+10 {
			t.Fatalf("refresh = %+v, %v; want mine with fence %d", r, err, c.Fence+10)
		}
		check("after the refresh", engine.Bound, c.Fence+10)
		mustRelease(t, n, "k", token, true)
		// The key goes; its meta stays for the rest of its TTL (a heal
		// must not follow a release: extend.lua).
		if got := raw.Exists(ctx, "k").Val(); got != 0 {
			t.Errorf("the key left after the release")
		}
		if ttl := raw.PTTL(ctx, "lockproxy:meta:k").Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("meta PTTL after the release = %v, want the rest of its (0, 1m]", ttl)
		}
	})
}
