package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// wrongType is Redis's error for a command on a key of another type.
const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// hashLock writes a Redisson-style lock hash at KEYS[1] with a TTL.
const hashLock = `redis.call('HSET', KEYS[1], ARGV[1], 1) redis.call('PEXPIRE', KEYS[1], 30000) return 1`

// TestGetForeignTypeMatchesRedis: GET of a key a lock script made a hash
// answers WRONGTYPE, in RESP2 and RESP3, on one redis-server and through
// lockproxy over three nodes (where the script ran on every node), and so
// does SET … NX GET; GET of a lock taken with SET NX answers its token,
// and of a free key null.
func TestGetForeignTypeMatchesRedis(t *testing.T) {
	scriptTargets(t, nil, func(t *testing.T, addr string, _ []*redistest.Server) {
		ctx := compatCtx(t)
		c := newClient(t, addr, 2)
		key, own := uniqueKey(t), uniqueKey(t)
		if err := c.Eval(ctx, hashLock, []string{key}, "8f2c0a:1").Err(); err != nil {
			t.Fatal(err)
		}
		if ok, err := c.SetNX(ctx, own, "tok", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX: %v %v", ok, err)
		}
		for _, proto := range []int{2, 3} {
			r := dialProto(t, addr, proto)
			for _, tc := range [][2]string{{key, "-" + wrongType}, {own, "tok"}, {key + ":free", "(nil)"}} {
				if got := r.do("GET", tc[0]); got != tc[1] {
					t.Errorf("RESP%d GET %s: %q, want %q", proto, tc[0], got, tc[1])
				}
			}
			for _, tc := range [][]string{
				{"-" + wrongType, "SET", key, "v", "NX", "GET"},
				{"(nil)", "SET", key, "v", "NX", "PX", "10000"},
				{"tok", "SET", own, "v", "NX", "GET"},
			} {
				if got := r.do(tc[1:]...); got != tc[0] {
					t.Errorf("RESP%d %v: %q, want %q", proto, tc[1:], got, tc[0])
				}
			}
			if got := r.do("PING"); got != "+PONG" {
				t.Errorf("RESP%d: the connection after WRONGTYPE: %q", proto, got)
			}
		}
	})
}

// TestGetForeignTypeNodes: through lockproxy GET answers WRONGTYPE when a
// majority of the nodes hold the key with another type, and null when
// only a minority does (the majority has it free); with the hash on every
// node, a node killed, or restarted empty, leaves a majority that says so,
// and the answer stays WRONGTYPE; with one node killed and another paused
// no majority answers, and it is an error that says so, never a guess.
func TestGetForeignTypeNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Redlock.NodeTimeoutMS = 500
	c := newClient(t, startInstance(t, cfg).Addr(), 2)
	raws := nodeClients(t, addrsOf(nodes)...)
	write := func(key string, on []*redis.Client) {
		t.Helper()
		for _, n := range on {
			if err := n.Eval(ctx, hashLock, []string{key}, "8f2c0a:1").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	get := func(key, want string) {
		t.Helper()
		v, err := c.Get(ctx, key).Result()
		got := v
		switch {
		case err == redis.Nil:
			got = "(nil)"
		case err != nil:
			got = err.Error()
		}
		if !strings.HasPrefix(got, want) {
			t.Errorf("GET %s: %q, want %q", key, got, want)
		}
	}
	two, one, all := uniqueKey(t), uniqueKey(t), uniqueKey(t)
	write(two, raws[:2])
	write(one, raws[2:])
	write(all, raws)
	get(two, wrongType)
	get(one, "(nil)")
	get(all, wrongType)

	if err := nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	get(all, wrongType)
	pause(t, nodes[1])
	get(all, "NOQUORUM")
	resume(t, nodes[1])
	get(all, wrongType)
	if err := nodes[0].Restart(); err != nil { // back empty (no persistence)
		t.Fatal(err)
	}
	get(all, wrongType) // nodes 1 and 2 still hold the hash; node 0 has it free
}
