package instance_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// publishFromARGV is the shape Redisson 3.22+ uses: the publish command
// comes from ARGV.
const publishFromARGV = `redis.call(ARGV[2], KEYS[1], ARGV[1]) return 1`

// TestScriptPublishFromARGV: a script that takes its publish command from
// ARGV[n] runs, and its message reaches a SUBSCRIBE subscriber, on Redis
// and on lockproxy (whose subscribers listen to the nodes).
func TestScriptPublishFromARGV(t *testing.T) {
	scriptTargets(t, nil, func(t *testing.T, addr string, _ []*redistest.Server) {
		ctx := compatCtx(t)
		c := newClient(t, addr, 2)
		ch := "redisson_lock__channel:{" + uniqueKey(t) + "}"
		ps := c.Subscribe(ctx, ch)
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"publish", "PUBLISH", "Publish"} {
			if n, err := c.Eval(ctx, publishFromARGV, []string{ch}, "0", cmd).Int64(); err != nil || n != 1 {
				t.Fatalf("EVAL with %s: %v %v", cmd, n, err)
			}
			if msg, ok := awaitMessage(ps, compatWaitBound); !ok || msg != "0" {
				t.Fatalf("message after %s: %q %v", cmd, msg, ok)
			}
		}
	})
}

// TestScriptPublishFromARGVChecked: lockproxy checks ARGV[n] before the
// script reaches any node: anything but PUBLISH or SPUBLISH, or a missing
// ARGV[n], is refused and nothing runs. SPUBLISH is delivered to
// SSUBSCRIBE subscribers, as on a plain Redis 7.0 (TestShardPubSubAcrossInstances
// checks it reaches no SUBSCRIBE subscriber).
func TestScriptPublishFromARGVChecked(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	c := newClient(t, startInstance(t, testConfig(nodes)).Addr(), 2)
	ctx := compatCtx(t)
	key := uniqueKey(t)
	if err := c.Eval(ctx, `return redis.call('SET', KEYS[1], 'v')`, []string{key}).Err(); err != nil {
		t.Fatal(err)
	}
	// The script answers once a majority ran it; the last node a moment later.
	for i, n := range nodes {
		nc := nodeClient(t, n)
		eventually(t, 10*time.Second, fmt.Sprintf("node %d holds the key", i), func() bool {
			v, err := nc.Get(ctx, key).Result()
			return err == nil && v == "v"
		})
	}
	for _, argv := range [][]any{{"0", "del"}, {"0", "DEL"}, {"0", "flushall"}, {"0"}, {"0", "publish2"}} {
		err := c.Eval(ctx, publishFromARGV, []string{key}, argv...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), refusedPrefix) || !strings.Contains(err.Error(), "ARGV[2], which must be PUBLISH or SPUBLISH") {
			t.Fatalf("ARGV %v: %v, want a refusal", argv, err)
		}
	}
	for i, n := range nodes {
		if v, err := nodeClient(t, n).Get(ctx, key).Result(); err != nil || v != "v" {
			t.Fatalf("node %d: %q %v: a refused script ran", i, v, err)
		}
	}
	// The connection stays usable.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ch := "redisson_sc:{" + key + "}"
	ps := c.SSubscribe(ctx, ch)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Eval(ctx, publishFromARGV, []string{ch}, "3", "spublish").Int64(); err != nil || n != 1 {
		t.Fatalf("EVAL with spublish: %v %v", n, err)
	}
	if msg, ok := awaitMessage(ps, compatWaitBound); !ok || msg != "3" {
		t.Fatalf("message after spublish: %q %v", msg, ok)
	}
}

// readState writes, through the target, the keys the read commands read.
const readState = `
redis.call('HSET', KEYS[1], 'mode', 'write', 'id:1', '2')
redis.call('RPUSH', KEYS[2], 'a', 'b', 'c')
redis.call('ZADD', KEYS[3], 1, 'x', 2, 'y')
redis.call('SADD', KEYS[4], 'm')
redis.call('SET', KEYS[5], 'hello')
return 1`

// TestReadCommands: the read-only commands a lock library reads its own
// keys with give what Redis gives, arity and type errors included.
func TestReadCommands(t *testing.T) {
	scriptTargets(t, nil, func(t *testing.T, addr string, _ []*redistest.Server) {
		ctx := compatCtx(t)
		c := newClient(t, addr, 2)
		base := uniqueKey(t)
		h, l, z, s, str := base+":h", base+":l", base+":z", base+":s", base+":str"
		if err := c.Eval(ctx, readState, []string{h, l, z, s, str}).Err(); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args []any
			want string
		}{
			{[]any{"HGET", h, "id:1"}, "2"},
			{[]any{"hget", h, "nope"}, "<nil>"},
			{[]any{"HGET", base + ":none", "f"}, "<nil>"},
			{[]any{"HEXISTS", h, "id:1"}, "1"},
			{[]any{"HEXISTS", h, "id:2"}, "0"},
			{[]any{"HLEN", h}, "2"},
			{[]any{"HMGET", h, "mode", "x"}, "[write <nil>]"},
			{[]any{"HSTRLEN", h, "mode"}, "5"},
			{[]any{"HKEYS", h}, "[mode id:1]"},
			{[]any{"HVALS", h}, "[write 2]"},
			{[]any{"HGETALL", h}, "[mode write id:1 2]"},
			{[]any{"LRANGE", l, "0", "-1"}, "[a b c]"},
			{[]any{"LINDEX", l, "1"}, "b"},
			{[]any{"ZRANGE", z, "0", "-1", "WITHSCORES"}, "[x 1 y 2]"},
			{[]any{"ZSCORE", z, "y"}, "2"},
			{[]any{"ZRANK", z, "y"}, "1"},
			{[]any{"ZRANK", z, "q"}, "<nil>"},
			{[]any{"ZREVRANK", z, "y"}, "0"},
			{[]any{"ZCARD", z}, "2"},
			{[]any{"ZCOUNT", z, "-inf", "+inf"}, "2"},
			{[]any{"ZMSCORE", z, "x", "q"}, "[1 <nil>]"},
			{[]any{"SCARD", s}, "1"},
			{[]any{"SISMEMBER", s, "m"}, "1"},
			{[]any{"SMISMEMBER", s, "m", "n"}, "[1 0]"},
			{[]any{"SMEMBERS", s}, "[m]"},
			{[]any{"STRLEN", str}, "5"},
			{[]any{"GETRANGE", str, "1", "3"}, "ell"},
			{[]any{"HGET", h}, "ERR wrong number of arguments for 'hget' command"},
			{[]any{"HEXISTS", h, "a", "b"}, "ERR wrong number of arguments for 'hexists' command"},
			{[]any{"LRANGE", l, "0"}, "ERR wrong number of arguments for 'lrange' command"},
			{[]any{"HGET", str, "f"}, "WRONGTYPE Operation against a key holding the wrong kind of value"},
			{[]any{"LRANGE", l, "x", "1"}, "ERR value is not an integer or out of range"},
			{[]any{"ZRANGE", z, "0", "-1", "BOGUS"}, "ERR syntax error"},
		} {
			v, err := c.Do(ctx, tc.args...).Result()
			got := fmt.Sprint(v)
			if err != nil {
				got = err.Error()
				if err == redis.Nil {
					got = "<nil>"
				}
			}
			if got != tc.want {
				t.Errorf("%v: got %s, want %s", tc.args, got, tc.want)
			}
		}
		// TYPE, EXISTS and PTTL on such keys still answer as before.
		if n, err := c.Exists(ctx, h).Result(); err != nil || n != 1 {
			t.Errorf("EXISTS of the hash: %v %v", n, err)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReadCommandsNodeDown: with one of three nodes paused (SIGSTOP), HGET
// still gets the majority's reply; with the nodes disagreeing and no
// majority, it is NOQUORUM, never a guess.
func TestReadCommandsNodeDown(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	c := newClient(t, startInstance(t, testConfig(nodes)).Addr(), 2)
	ctx := compatCtx(t)
	key := uniqueKey(t)
	if err := c.Eval(ctx, `return redis.call('HSET', KEYS[1], 'f', 'v')`, []string{key}).Err(); err != nil {
		t.Fatal(err)
	}
	pause(t, nodes[2])
	start := time.Now()
	if v, err := c.HGet(ctx, key, "f").Result(); err != nil || v != "v" {
		t.Fatalf("HGET with a node paused: %q %v", v, err)
	}
	t.Logf("HGET with a node paused answered in %v", time.Since(start))
	if err := nodes[2].Resume(); err != nil {
		t.Fatal(err)
	}
	// The nodes disagree: f = v, w, and missing.
	if err := nodeClient(t, nodes[1]).HSet(ctx, key, "f", "w").Err(); err != nil {
		t.Fatal(err)
	}
	if err := nodeClient(t, nodes[2]).Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HGet(ctx, key, "f").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM the nodes disagreed") {
		t.Fatalf("HGET with the nodes disagreeing: %v, want NOQUORUM", err)
	}
}

// TestReadCommandsZooKeeper: the zookeeper backend has no such keys and
// says so, naming the redlock backend.
func TestReadCommandsZooKeeper(t *testing.T) {
	c := newClient(t, startInstance(t, zkConfig(zktest.Start(t))).Addr(), 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.HGet(ctx, "k", "f").Err()
	if err == nil || !strings.Contains(err.Error(), "HGET reads keys that only the redlock backend's nodes hold") || !strings.Contains(err.Error(), "zookeeper backend") {
		t.Fatalf("HGET on zookeeper: %v", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}
