package instance_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// onEveryNode waits until check passes on every node: a write through
// lockproxy is answered once a majority has it, the last node may lag.
func onEveryNode(t *testing.T, raws []*redis.Client, what string, check func(c *redis.Client) bool) {
	t.Helper()
	for i, c := range raws {
		eventually(t, 30*time.Second, what+" on node "+string(rune('0'+i)), func() bool { return check(c) })
	}
}

// TestNodeHoldsWhatRedisWould (issue 13): after SET k tok NX PX 30000
// through lockproxy, each node holds k as one Redis would — the string tok
// with a PTTL of at most 30 s; a native LOCK leaves its token there; a
// release removes the key; and an operator's KEYS * shows the
// application's keys plus only lockproxy:-prefixed bookkeeping. In a
// SELECTed database the key is lockproxy:db<n>:k.
func TestNodeHoldsWhatRedisWould(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	raws := nodeClients(t, addrsOf(nodes)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, db := range []int{0, 1} {
		c := redis.NewClient(&redis.Options{Addr: in.Addr(), DB: db, MaxRetries: -1, PoolSize: 1})
		t.Cleanup(func() { c.Close() })
		stored := func(k string) string {
			if db == 0 {
				return k
			}
			return "lockproxy:db1:" + k
		}
		key, native, lease := uniqueKey(t), uniqueKey(t), uniqueKey(t)

		if ok, err := c.SetNX(ctx, key, "tok", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("db %d: SET NX PX 30000: %v %v", db, ok, err)
		}
		onEveryNode(t, raws, "GET k is tok", func(n *redis.Client) bool { return n.Get(ctx, stored(key)).Val() == "tok" })
		for i, n := range raws {
			typ, pttl := n.Type(ctx, stored(key)).Val(), n.PTTL(ctx, stored(key)).Val()
			if typ != "string" || pttl <= 0 || pttl > 30*time.Second {
				t.Errorf("db %d node %d: TYPE %s PTTL %v; want string with (0, 30s]", db, i, typ, pttl)
			}
		}

		bound := mustLock(t, c, native)
		leased := mustLock(t, c, lease, "PX", 30000)
		onEveryNode(t, raws, "GET is LOCK's token", func(n *redis.Client) bool {
			return n.Get(ctx, stored(native)).Val() == bound.token && n.Get(ctx, stored(lease)).Val() == leased.token
		})
		for i, n := range raws {
			// A connection-bound lock keeps the watchdog's lease on the
			// nodes (one Redis would show PTTL -1 for SETNX's key).
			if pttl := n.PTTL(ctx, stored(native)).Val(); pttl <= 0 || pttl > 1500*time.Millisecond {
				t.Errorf("db %d node %d: bound lock PTTL %v, want the watchdog's (0, 1.5s]", db, i, pttl)
			}
		}

		ours := []string{stored(key), stored(native), stored(lease)}
		for i, n := range raws {
			all, err := n.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range ours {
				if !slices.Contains(all, k) {
					t.Errorf("db %d node %d: KEYS * lacks %q: %v", db, i, k, all)
				}
			}
			for _, k := range all {
				if !slices.Contains(ours, k) && !strings.HasPrefix(k, "lockproxy:") {
					t.Errorf("db %d node %d: KEYS * shows %q, neither the application's key nor lockproxy:-prefixed", db, i, k)
				}
			}
		}

		if n, err := c.Del(ctx, key).Result(); n != 1 || err != nil {
			t.Fatalf("db %d: DEL: %d %v", db, n, err)
		}
		if n, err := c.Do(ctx, "UNLOCK", native, bound.token).Int(); n != 1 || err != nil {
			t.Fatalf("db %d: UNLOCK: %d %v", db, n, err)
		}
		if n, err := c.Do(ctx, "UNLOCK", lease, leased.token).Int(); n != 1 || err != nil {
			t.Fatalf("db %d: UNLOCK: %d %v", db, n, err)
		}
		onEveryNode(t, raws, "released keys gone", func(n *redis.Client) bool {
			return n.Exists(ctx, stored(key), stored(native), stored(lease)).Val() == 0
		})
		// Each meta stays for the rest of its lease and a grace (a renewal
		// held up on its way heals nothing after a release), no longer: 5 s
		// with the automatic node timeout (quorum's metaGrace).
		for i, n := range raws {
			for _, k := range []string{stored(key), stored(native), stored(lease)} {
				if pttl := n.PTTL(ctx, "lockproxy:meta:"+k).Val(); pttl > 35*time.Second || pttl == -1 {
					t.Errorf("db %d node %d: %s's meta PTTL %v after the release, want at most the lease and the grace", db, i, k, pttl)
				}
			}
		}
	}
}

// TestForeignHashOnNodes: a hash at k on every node, as a Redisson lock
// script run on the nodes leaves it, holds k for somebody else: LOCK, SET
// NX and SETNX are refused, PTTL, EXISTS, TYPE and LOCKINFO answer (held,
// token unknown), GET answers WRONGTYPE as one Redis does; the hash is
// left as it was.
func TestForeignHashOnNodes(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	raws := nodeClients(t, addrsOf(nodes)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := uniqueKey(t)
	for _, n := range raws {
		if err := n.HSet(ctx, key, "8f2c0a:1", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := n.PExpire(ctx, key, 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, in.Addr(), 2)
	if _, ok, err := lock(ctx, c, key, "PX", 10000); ok || err != nil {
		t.Errorf("LOCK on a hash: granted %v, %v; want a null", ok, err)
	}
	if _, ok, err := lock(ctx, c, key); ok || err != nil {
		t.Errorf("bound LOCK on a hash: granted %v, %v; want a null", ok, err)
	}
	if ok, err := c.SetNX(ctx, key, "tok", 10*time.Second).Result(); ok || err != nil {
		t.Errorf("SET NX PX on a hash: %v, %v; want a null", ok, err)
	}
	if n, err := c.Do(ctx, "SETNX", key, "tok").Int(); n != 0 || err != nil {
		t.Errorf("SETNX on a hash: %d, %v; want 0", n, err)
	}
	if v, err := c.Get(ctx, key).Result(); err == nil || err.Error() != wrongType {
		t.Errorf("GET of a hash: %q, %v; want WRONGTYPE, as one Redis answers", v, err)
	}
	if ms, err := c.PTTL(ctx, key).Result(); ms <= 0 || ms > 30*time.Second || err != nil {
		t.Errorf("PTTL of a hash: %v, %v; want its own (0, 30s]", ms, err)
	}
	if n, err := c.Exists(ctx, key).Result(); n != 1 || err != nil {
		t.Errorf("EXISTS of a hash: %d, %v; want 1", n, err)
	}
	if typ, err := c.Type(ctx, key).Result(); typ != "hash" || err != nil {
		t.Errorf("TYPE of a hash: %q, %v; want hash", typ, err)
	}
	if n, err := c.Del(ctx, key).Result(); n != 0 || err != nil {
		t.Errorf("DEL of a hash: %d, %v; want 0 (only its owner's script releases it)", n, err)
	}
	if n, err := c.Do(ctx, "UNLOCK", key, "tok").Int(); n != 0 || err != nil {
		t.Errorf("UNLOCK of a hash: %d, %v; want 0", n, err)
	}
	info, err := c.Do(ctx, "LOCKINFO", key).Slice()
	if err != nil || len(info) != 10 || info[0] != "fence" || info[1] != int64(0) || info[2] != "validity" {
		t.Fatalf("LOCKINFO of a hash: %v, %v", info, err)
	}
	if v, _ := info[3].(int64); v <= 0 || v > 30000 {
		t.Errorf("LOCKINFO validity %v, want (0, 30000]", info[3])
	}
	for i, n := range raws {
		if typ, v := n.Type(ctx, key).Val(), n.HGet(ctx, key, "8f2c0a:1").Val(); typ != "hash" || v != "1" {
			t.Errorf("node %d: the hash is now a %s with field %q", i, typ, v)
		}
		if got := n.Exists(ctx, "lockproxy:meta:"+key).Val(); got != 0 {
			t.Errorf("node %d: a meta hash for a key lockproxy does not hold", i)
		}
	}
}

// TestScriptOnMajorityMovesTheLock: a script run on a majority of the
// nodes (as lockproxy runs an unknown lock script) that extends a lock key
// taken by SET NX PX moves lockproxy's PTTL with it, and one that deletes
// it frees the key for another token, though the meta hash is still
// there.
func TestScriptOnMajorityMovesTheLock(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	raws := nodeClients(t, addrsOf(nodes)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := uniqueKey(t)
	c := newClient(t, in.Addr(), 2)
	if ok, err := c.SetNX(ctx, key, "tok", 30*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX PX 30000: %v %v", ok, err)
	}
	onEveryNode(t, raws, "GET k is tok", func(n *redis.Client) bool { return n.Get(ctx, key).Val() == "tok" })
	const extend = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
	for _, n := range raws[:2] {
		if got, err := n.Eval(ctx, extend, []string{key}, "tok", 60000).Int(); got != 1 || err != nil {
			t.Fatalf("the script's PEXPIRE: %d %v", got, err)
		}
	}
	if ms, err := c.PTTL(ctx, key).Result(); ms <= 30*time.Second || ms > time.Minute || err != nil {
		t.Errorf("PTTL after a majority's PEXPIRE 60000: %v, %v; want (30s, 60s]", ms, err)
	}
	const del = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
	for _, n := range raws[:2] {
		if got, err := n.Eval(ctx, del, []string{key}, "tok").Int(); got != 1 || err != nil {
			t.Fatalf("the script's DEL: %d %v", got, err)
		}
		if n.Exists(ctx, "lockproxy:meta:"+key).Val() != 1 {
			t.Fatal("the meta hash went with the key: the test shows nothing")
		}
	}
	if v, err := c.Get(ctx, key).Result(); err != redis.Nil {
		t.Errorf("GET after a majority's DEL: %q, %v; want a null", v, err)
	}
	if ok, err := c.SetNX(ctx, key, "tok2", 30*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX PX by another token after the DEL: %v %v", ok, err)
	}
	if v, err := c.Get(ctx, key).Result(); v != "tok2" || err != nil {
		t.Errorf("GET: %q, %v; want tok2", v, err)
	}
	for i, n := range raws[:2] {
		if v := n.Get(ctx, key).Val(); v != "tok2" {
			t.Errorf("node %d holds %q, want tok2", i, v)
		}
	}
}

// TestForeignHashThroughNodeFaults: while a majority of nodes holds a
// Redisson-style hash at k, no LOCK or SET NX on k is granted — with every
// node up, with one of the hash's nodes paused, killed and restarted (its
// AOF keeps the hash) — the refused attempts leave nothing on the free
// node once it answers, and once the hash's owner deletes it the key is
// granted with a fence.
func TestForeignHashThroughNodeFaults(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{AppendFsyncAlways: true})
	in := startInstance(t, testConfig(nodes))
	raws := nodeClients(t, addrsOf(nodes)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := uniqueKey(t)
	for _, n := range raws[:2] {
		if err := n.HSet(ctx, key, "8f2c0a:1", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := n.PExpire(ctx, key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, in.Addr(), 2)
	refused := func(phase string) {
		t.Helper()
		for range 3 {
			if r, ok, err := lock(ctx, c, key, "PX", 10000); ok {
				t.Fatalf("%s: LOCK granted %+v over a majority's hash", phase, r)
			} else if err != nil {
				t.Logf("%s: LOCK: %v", phase, err) // an error is no grant
			}
			if ok, err := c.SetNX(ctx, key, "tok", 10*time.Second).Result(); ok {
				t.Fatalf("%s: SET NX granted over a majority's hash", phase)
			} else if err != nil {
				t.Logf("%s: SET NX: %v", phase, err)
			}
		}
	}
	refused("all up")
	pause(t, nodes[0])
	refused("node 0 paused")
	resume(t, nodes[0])
	if err := nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	refused("node 1 killed")
	if err := nodes[1].Restart(); err != nil {
		t.Fatal(err)
	}
	raws[1] = newClient(t, nodes[1].Addr(), 2)
	refused("node 1 restarted")
	eventually(t, 30*time.Second, "the refused attempts rolled back on the free node", func() bool {
		return raws[2].Exists(ctx, key).Val() == 0 // the meta stays for its lease and the grace
	})
	for i, n := range raws[:2] {
		if typ := n.Type(ctx, key).Val(); typ != "hash" {
			t.Fatalf("node %d: the hash is now %q", i, typ)
		}
		if err := n.Del(ctx, key).Err(); err != nil { // its owner's script releases it
			t.Fatal(err)
		}
	}
	var g lockReply
	eventually(t, 30*time.Second, "LOCK granted once the hash is gone", func() bool {
		r, ok, err := lock(ctx, c, key, "PX", 10000)
		g = r
		return ok && err == nil
	})
	if g.fence <= 0 {
		t.Errorf("grant after the hash: fence %d", g.fence)
	}
	// A majority holds it; a node that failed lately may be left out.
	held := 0
	for _, n := range raws {
		if n.Get(ctx, key).Val() == g.token {
			held++
		}
	}
	if held < 2 {
		t.Errorf("the grant's token is on %d nodes, want a majority", held)
	}
}
