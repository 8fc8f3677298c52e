package instance_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// Issue 13: scripts outside the catalog run unchanged on every node. Each
// test runs first against one plain redis-server ("redis"), which proves
// the check, then against lockproxy over three redis-servers ("lockproxy").

// Scripts written for issue 13; none is in lockproxy's catalog.
const (
	pttlIfHeldScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PTTL', KEYS[1]) end return -3`
	extendIfHeld     = `local v = redis.call('GET', KEYS[1]) if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`
	releaseIfHeld    = `if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 'released' end return 'not held'`
	// A reentrant lock in a hash: owner -> hold count.
	reentrantLockScript = `
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`
	reentrantUnlockScript = `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return nil end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then return 0 end
redis.call('DEL', KEYS[1])
return 1`
	incrScript = `return redis.call('INCR', KEYS[1])`
)

const refusedPrefix = "ERR lockproxy refused this script before running it on any node: "

// scriptTargets runs check against one plain redis-server and against
// lockproxy (configured by tune) over three; nodes are the servers behind
// addr.
func scriptTargets(t *testing.T, tune func(*instance.Config), check func(t *testing.T, addr string, nodes []*redistest.Server)) {
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t, redistest.Options{})
		check(t, s.Addr(), []*redistest.Server{s})
	})
	t.Run("lockproxy", func(t *testing.T) {
		nodes := redistest.StartN(t, 3, redistest.Options{})
		cfg := testConfig(nodes)
		if tune != nil {
			tune(&cfg)
		}
		check(t, startInstance(t, cfg).Addr(), nodes)
	})
}

func nodeClient(t *testing.T, s *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestScriptReadsExtendsReleasesLock: a lock taken with SET NX PX is read
// (its remaining time), extended and released by scripts outside the
// catalog; SCRIPT LOAD gives the real SHA1, EVALSHA runs it, and an
// unknown SHA1 gets Redis's NOSCRIPT error word for word.
func TestScriptReadsExtendsReleasesLock(t *testing.T) {
	scriptTargets(t, nil, func(t *testing.T, addr string, _ []*redistest.Server) {
		ctx := compatCtx(t)
		c := newClient(t, addr, 2)
		key := uniqueKey(t)
		if ok, err := c.SetNX(ctx, key, "tokA", 10*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX: %v %v", ok, err)
		}
		start := time.Now()
		pttl, err := c.Eval(ctx, pttlIfHeldScript, []string{key}, "tokA").Int64()
		if err != nil || pttl <= 0 || pttl > 10000 || pttl < 10000-time.Since(start).Milliseconds()-1000 {
			t.Fatalf("PTTL if held: %v %v", pttl, err)
		}
		if n, err := c.Eval(ctx, pttlIfHeldScript, []string{key}, "tokB").Int64(); n != -3 || err != nil {
			t.Fatalf("PTTL if held, another token: %v %v", n, err)
		}
		sha, err := c.ScriptLoad(ctx, extendIfHeld).Result()
		if err != nil || sha != sha1hex(extendIfHeld) {
			t.Fatalf("SCRIPT LOAD: %q %v, want %s", sha, err, sha1hex(extendIfHeld))
		}
		if ex, err := c.ScriptExists(ctx, sha, strings.ToUpper(sha), sha1hex("nope")).Result(); err != nil || !ex[0] || !ex[1] || ex[2] {
			t.Fatalf("SCRIPT EXISTS: %v %v", ex, err)
		}
		if n, err := c.EvalSha(ctx, sha, []string{key}, "tokA", 60000).Int64(); n != 1 || err != nil {
			t.Fatalf("extend: %v %v", n, err)
		}
		if pttl, err := c.Eval(ctx, pttlIfHeldScript, []string{key}, "tokA").Int64(); err != nil || pttl <= 10000 || pttl > 60000 {
			t.Fatalf("PTTL after the extend: %v %v", pttl, err)
		}
		if ok, err := c.SetNX(ctx, key, "tokB", 10*time.Second).Result(); ok || err != nil {
			t.Fatalf("SET NX by another while held: %v %v", ok, err)
		}
		if s, err := c.Eval(ctx, releaseIfHeld, []string{key}, "tokB").Text(); s != "not held" || err != nil {
			t.Fatalf("release by another: %q %v", s, err)
		}
		if s, err := c.Eval(ctx, releaseIfHeld, []string{key}, "tokA").Text(); s != "released" || err != nil {
			t.Fatalf("release: %q %v", s, err)
		}
		if ok, err := c.SetNX(ctx, key, "tokB", 10*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX after the release: %v %v", ok, err)
		}
		err = c.EvalSha(ctx, sha1hex("never loaded"), []string{key}).Err()
		if err == nil || err.Error() != "NOSCRIPT No matching script. Please use EVAL." {
			t.Fatalf("EVALSHA of an unknown script: %v", err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.EvalSha(ctx, sha, []string{key}, "tokB", 1000).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			t.Fatalf("EVALSHA after SCRIPT FLUSH: %v", err)
		}
	})
}

// reentrant takes or releases the reentrant hash lock.
func reentrant(ctx context.Context, c *redis.Client, script, key, owner string, ttlMS int) (int64, error) {
	n, err := c.Eval(ctx, script, []string{key}, owner, ttlMS).Int64()
	if errors.Is(err, redis.Nil) {
		return -1, nil
	}
	return n, err
}

// TestScriptReentrantLockTwoClients: two clients take and release a
// reentrant hash lock, written for this test, in a bounded loop; a checker
// fails if both hold it at once.
func TestScriptReentrantLockTwoClients(t *testing.T) {
	scriptTargets(t, nil, func(t *testing.T, addr string, _ []*redistest.Server) {
		key := uniqueKey(t)
		var holders atomic.Int32
		var grants atomic.Int32
		var wg sync.WaitGroup
		for i := range 2 {
			c := newClient(t, addr, 2)
			owner := "owner-" + strconv.Itoa(i)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				for range 25 {
					for {
						n, err := reentrant(ctx, c, reentrantLockScript, key, owner, 10000)
						if err != nil {
							t.Errorf("%s: lock: %v", owner, err)
							return
						}
						if n == 1 {
							break
						}
						time.Sleep(time.Millisecond)
					}
					if h := holders.Add(1); h != 1 {
						t.Errorf("%d holders at once", h)
					}
					grants.Add(1)
					if n, err := reentrant(ctx, c, reentrantLockScript, key, owner, 10000); n != 1 || err != nil {
						t.Errorf("%s: reentrant lock: %v %v", owner, n, err)
					}
					if n, err := reentrant(ctx, c, reentrantUnlockScript, key, owner, 0); n != 0 || err != nil {
						t.Errorf("%s: inner unlock: %v %v", owner, n, err)
					}
					holders.Add(-1)
					if n, err := reentrant(ctx, c, reentrantUnlockScript, key, owner, 0); n != 1 || err != nil {
						t.Errorf("%s: unlock: %v %v", owner, n, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if grants.Load() != 50 {
			t.Fatalf("%d grants, want 50", grants.Load())
		}
		// A hash lock taken by a script is a held key to SET NX.
		c := newClient(t, addr, 2)
		ctx := compatCtx(t)
		if n, err := reentrant(ctx, c, reentrantLockScript, key, "owner-x", 10000); n != 1 || err != nil {
			t.Fatalf("lock: %v %v", n, err)
		}
		if ok, err := c.SetNX(ctx, key, "tok", 10*time.Second).Result(); ok || err != nil {
			t.Fatalf("SET NX of a key a script holds: %v %v", ok, err)
		}
	})
}

// TestScriptBadInputRefused: scripts that call FLUSHALL, KEYS, CONFIG, or
// name a key outside KEYS run on a plain Redis (they are valid scripts);
// lockproxy refuses each before any node runs it, with the reason, and
// the connection stays usable.
func TestScriptBadInputRefused(t *testing.T) {
	bad := []struct{ src, why string }{
		{`return redis.call('FLUSHALL')`, "line 1: redis.call('flushall'): FLUSHALL may not be used, it erases the node"},
		{`return redis.call('KEYS', '*')`, "KEYS may not be used, it reads keys that are not in KEYS"},
		{`return redis.call('CONFIG', 'GET', 'maxmemory')`, "CONFIG may not be used, it administers the node"},
		{`return redis.call('SET', ARGV[1], 'x')`, "argument 1 is a key and must come from KEYS"},
		{`local c = 'FLUSHALL' return redis.call(c)`, "must name its command with a string literal"},
	}
	scriptTargets(t, nil, func(t *testing.T, addr string, nodes []*redistest.Server) {
		ctx := compatCtx(t)
		c := newClient(t, addr, 2)
		sentinel := uniqueKey(t)
		for _, n := range nodes {
			if err := nodeClient(t, n).Set(ctx, sentinel, "kept", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range bad {
			err := c.Eval(ctx, b.src, []string{"k"}, "other").Err()
			if len(nodes) == 1 { // valid scripts: a plain Redis runs them (CONFIG: Redis's own refusal)
				if err != nil && !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "not allowed from script") {
					t.Errorf("redis: %s: %v", b.src, err)
				}
				continue
			}
			if err == nil || !strings.HasPrefix(err.Error(), refusedPrefix+"line 1: ") || !strings.Contains(err.Error(), b.why) ||
				!strings.HasSuffix(err.Error(), " (docs/lock-scripts.md)") {
				t.Errorf("%s:\n got %v\nwant %s%s", b.src, err, refusedPrefix, b.why)
			}
			if err := c.ScriptLoad(ctx, b.src).Err(); err == nil || !strings.HasPrefix(err.Error(), refusedPrefix) {
				t.Errorf("SCRIPT LOAD %s: %v", b.src, err)
			}
		}
		if len(nodes) == 1 {
			return
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after the refusals: %v", err)
		}
		for i, n := range nodes {
			if v, err := nodeClient(t, n).Get(ctx, sentinel).Result(); v != "kept" || err != nil {
				t.Fatalf("node %d lost its keys: %q %v", i, v, err)
			}
		}
		// lockproxy's own keys on the nodes are out of reach.
		for _, key := range []string{"lockproxy:fence:" + sentinel, "lockproxy:meta:x"} {
			err := c.Eval(ctx, `return redis.call('SET', KEYS[1], 0)`, []string{key}).Err()
			if err == nil || !strings.Contains(err.Error(), "could reach lockproxy's own keys on the nodes") {
				t.Fatalf("a script writing %s: %v", key, err)
			}
		}
		err := c.Eval(ctx, `return redis.call('SET', KEYS[1] .. ARGV[1], 0)`, []string{"lockproxy:"}, "fence:x").Err()
		if err == nil || !strings.Contains(err.Error(), "could reach lockproxy's own keys") {
			t.Fatalf("a derived key under the prefix: %v", err)
		}
	})
}

// TestScriptErrorsOnSomeNodes: INCR on a key that is a hash on some nodes
// only. The majority's reply wins; the same error from a majority is that
// error; three different replies are an error saying the nodes disagreed.
func TestScriptErrorsOnSomeNodes(t *testing.T) {
	scriptTargets(t, nil, func(t *testing.T, addr string, nodes []*redistest.Server) {
		ctx := compatCtx(t)
		c := newClient(t, addr, 2)
		key := uniqueKey(t)
		n0 := nodeClient(t, nodes[0])
		n0.HSet(ctx, key, "f", "v")
		if len(nodes) == 1 { // a plain Redis fails the script on a hash
			if err := c.Eval(ctx, incrScript, []string{key}).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
				t.Fatalf("INCR of a hash: %v", err)
			}
			return
		}
		// The hash on node 0 only: nodes 1 and 2 agree.
		if n, err := c.Eval(ctx, incrScript, []string{key}).Int64(); n != 1 && n != 2 || err != nil {
			t.Fatalf("hash on one node of three: %v %v", n, err)
		}
		key = uniqueKey(t)
		n0.HSet(ctx, key, "f", "v")
		nodeClient(t, nodes[1]).HSet(ctx, key, "f", "v")
		err := c.Eval(ctx, incrScript, []string{key}).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("hash on two nodes of three: %v, want their WRONGTYPE", err)
		}
		key = uniqueKey(t)
		n0.HSet(ctx, key, "f", "v")
		nodeClient(t, nodes[1]).Set(ctx, key, "41", 0)
		err = c.Eval(ctx, incrScript, []string{key}).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM the nodes disagreed: at most 1 of 3 gave the same reply, 2 needed") {
			t.Fatalf("three different replies: %v", err)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestScriptNeverReturns: while true do end. Redis itself never answers
// the caller (until SCRIPT KILL); lockproxy answers after its time limit
// with an error, kills the script on the nodes, and the nodes answer
// again.
func TestScriptNeverReturns(t *testing.T) {
	const loop = `while true do end`
	scriptTargets(t, func(cfg *instance.Config) { cfg.Legacy.ScriptTimeLimitMS = 1000 }, func(t *testing.T, addr string, nodes []*redistest.Server) {
		ctx := context.Background()
		if len(nodes) == 1 {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: time.Second})
			defer c.Close()
			if err := c.Eval(ctx, loop, nil).Err(); err == nil {
				t.Fatal("a plain Redis answered a script that never returns")
			}
			eventually(t, 30*time.Second, "SCRIPT KILL", func() bool {
				return nodeClient(t, nodes[0]).ScriptKill(ctx).Err() == nil
			})
			return
		}
		c := newClient(t, addr, 2)
		start := time.Now()
		err := c.Eval(ctx, loop, nil).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM 0 of 3 nodes answered, 2 needed; ") ||
			!strings.Contains(err.Error(), "did not finish within the script time limit (1000 ms) and were sent SCRIPT KILL") {
			t.Fatalf("a script that never returns: %v", err)
		}
		if took := time.Since(start); took < time.Second {
			t.Fatalf("answered after %v, before the time limit", took)
		}
		for i, n := range nodes {
			eventually(t, 60*time.Second, "node "+strconv.Itoa(i)+" answers PING", func() bool {
				return nodeClient(t, n).Ping(ctx).Err() == nil
			})
		}
		key := uniqueKey(t)
		eventually(t, 30*time.Second, "a lock through lockproxy", func() bool {
			ok, err := c.SetNX(ctx, key, "tok", 10*time.Second).Result()
			return ok && err == nil
		})
	})
}

// TestScriptCacheBounded: 10,000 distinct scripts loaded; each gets its
// real SHA1, and lockproxy keeps only legacy.max_scripts of them (the
// most recent), where a Redis 7.0 keeps them all.
func TestScriptCacheBounded(t *testing.T) {
	const n = 10000
	scriptTargets(t, func(cfg *instance.Config) { cfg.Legacy.MaxScripts = 100 }, func(t *testing.T, addr string, nodes []*redistest.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		c := newClient(t, addr, 2)
		src := func(i int) string { return `return redis.call('GET', KEYS[1]) .. '` + strconv.Itoa(i) + `'` }
		for lo := 0; lo < n; lo += 500 {
			pipe := c.Pipeline()
			cmds := make([]*redis.StringCmd, 0, 500)
			for i := lo; i < lo+500; i++ {
				cmds = append(cmds, pipe.ScriptLoad(ctx, src(i)))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			for j, cmd := range cmds {
				if cmd.Val() != sha1hex(src(lo+j)) {
					t.Fatalf("SCRIPT LOAD %d: %q", lo+j, cmd.Val())
				}
			}
		}
		ex, err := c.ScriptExists(ctx, sha1hex(src(0)), sha1hex(src(n-100)), sha1hex(src(n-1))).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 1 {
			if !ex[0] || !ex[2] {
				t.Fatalf("redis: SCRIPT EXISTS %v", ex)
			}
			return
		}
		if ex[0] || !ex[1] || !ex[2] {
			t.Fatalf("SCRIPT EXISTS of the first, the 100th last and the last: %v, want false true true", ex)
		}
		if err := c.EvalSha(ctx, sha1hex(src(0)), []string{"k"}).Err(); err == nil || err.Error() != "NOSCRIPT No matching script. Please use EVAL." {
			t.Fatalf("EVALSHA of an evicted script: %v", err)
		}
		if v, err := c.EvalSha(ctx, sha1hex(src(n-1)), []string{uniqueKey(t)}).Result(); err != nil || v != nil && v != "" {
			// GET of a missing key is false: false .. 'x' is a Lua error
			if err == nil || !strings.Contains(err.Error(), "attempt to concatenate") {
				t.Fatalf("EVALSHA of a cached script: %v %v", v, err)
			}
		}
	})
}

// TestScriptZooKeeperRefused: the zookeeper backend cannot run a script on
// nodes; it says so and names the redlock backend, and catalogued scripts
// still work.
func TestScriptZooKeeperRefused(t *testing.T) {
	in := startInstance(t, zkConfig(zktest.Start(t)))
	ctx := compatCtx(t)
	c := newClient(t, in.Addr(), 2)
	err := c.Eval(ctx, pttlIfHeldScript, []string{"k"}, "tok").Err()
	want := "ERR this script is not in lockproxy's catalog (docs/lock-scripts.md); scripts outside it run only on the redlock backend " +
		"(backend = \"redlock\" or \"embedded\"), and this instance uses the zookeeper backend"
	if err == nil || err.Error() != want {
		t.Fatalf("EVAL on zookeeper: %v", err)
	}
	if err := c.ScriptLoad(ctx, pttlIfHeldScript).Err(); err == nil || err.Error() != want {
		t.Fatalf("SCRIPT LOAD on zookeeper: %v", err)
	}
	release := `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	if n, err := c.Eval(ctx, release, []string{"k"}, "tok").Int64(); n != 0 || err != nil {
		t.Fatalf("a catalogued script on zookeeper: %v %v", n, err)
	}
}

// TestScriptEmbedded: the embedded backend's in-process nodes run scripts
// outside the catalog too, majority reply included.
func TestScriptEmbedded(t *testing.T) {
	cfg := instance.Default()
	cfg.Listen = "127.0.0.1:0"
	c := newClient(t, startInstance(t, cfg).Addr(), 2)
	ctx := compatCtx(t)
	key := uniqueKey(t)
	if ok, err := c.SetNX(ctx, key, "tokA", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	if pttl, err := c.Eval(ctx, pttlIfHeldScript, []string{key}, "tokA").Int64(); err != nil || pttl <= 0 || pttl > 10000 {
		t.Fatalf("PTTL if held: %v %v", pttl, err)
	}
	if n, err := reentrant(ctx, c, reentrantLockScript, key+":h", "o", 10000); n != 1 || err != nil {
		t.Fatalf("reentrant lock: %v %v", n, err)
	}
	if err := c.Eval(ctx, `return redis.call('FLUSHDB')`, nil).Err(); err == nil || !strings.HasPrefix(err.Error(), refusedPrefix) {
		t.Fatalf("FLUSHDB: %v", err)
	}
}
