package instance_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// Issue 26: scripts that cannot escape their keys, results that differ per
// node, and legacy corners — each reproduced through real lockproxy
// instances over real redis-servers.

// oneConn is a client of exactly one connection, so that a lock bound to
// the connection stays with it.
func oneConn(t *testing.T, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1, ReadTimeout: 30 * time.Second}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// concatEscape is the attack: __concat turns KEYS[1] .. t into
// ARGV[1], any key.
const concatEscape = "local t = setmetatable({}, {__concat = function(a, b) return ARGV[1] end})\nreturn redis.call('DEL', KEYS[1] .. t)"

// TestScriptCannotEscapeItsKeys: a client on a second instance cannot
// delete another client's lock, nor reset its fencing counter, through a
// metatable's __concat; the lock stays held on every node.
func TestScriptCannotEscapeItsKeys(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	one, two := startInstance(t, cfg), startInstance(t, cfg)
	ctx := t.Context()
	victim, own := uniqueKey(t), uniqueKey(t)
	holder, attacker := newClient(t, one.Addr(), 2), newClient(t, two.Addr(), 2)
	if err := holder.SetArgs(ctx, victim, "tokA", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
		t.Fatal(err)
	}
	fence := make([]string, len(nodes))
	for i, n := range nodes {
		fence[i] = nodeClient(t, n).Get(ctx, "lockproxy:layout").Val() // the fencing counter (layout 3)
	}
	for _, c := range []struct{ src, arg string }{
		{concatEscape, victim},
		{"local t = setmetatable({}, {__concat = function() return ARGV[1] end})\nreturn redis.call('SET', KEYS[1] .. t, 0)", "lockproxy:layout"},
		{"local t = setmetatable({}, {__concat = function() return ARGV[1] end})\nreturn redis.call('SET', KEYS[1] .. t, 'x', 'PX', 60000)", "lockproxy:turn:" + victim},
	} {
		err := attacker.Eval(ctx, c.src, []string{own}, c.arg).Err()
		if err == nil || !strings.HasPrefix(err.Error(), refusedPrefix) || !strings.Contains(err.Error(), "setmetatable is not allowed") {
			t.Fatalf("EVAL %q: %v, want a refusal", c.src, err)
		}
	}
	for i, n := range nodes {
		nc := nodeClient(t, n)
		if v, err := nc.Get(ctx, victim).Result(); v != "tokA" || err != nil {
			t.Errorf("node %d: GET victim = %q %v, want tokA", i, v, err)
		}
		if f := nc.Get(ctx, "lockproxy:layout").Val(); f != fence[i] || f == "" {
			t.Errorf("node %d: the fencing counter went from %q to %q", i, fence[i], f)
		}
		if n := nc.Exists(ctx, "lockproxy:turn:"+victim).Val(); n != 0 {
			t.Errorf("node %d: a turn was planted on the victim's key", i)
		}
	}
	if err := attacker.SetArgs(ctx, victim, "tokB", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a second SET NX on the held key: %v, want nil (not granted)", err)
	}
}

// TestScriptCannotPublishOnReservedChannels: a script cannot forge
// lockproxy's release notification, with the channel in ARGV or in KEYS;
// the connection-bound lock it named stays held by its holder.
func TestScriptCannotPublishOnReservedChannels(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	one, two := startInstance(t, cfg), startInstance(t, cfg)
	ctx := t.Context()
	key, tok := uniqueKey(t), "client-chosen-token"
	holder, attacker := oneConn(t, one.Addr()), newClient(t, two.Addr(), 2)
	if ok, err := holder.SetNX(ctx, key, tok, 0).Result(); !ok || err != nil {
		t.Fatalf("SETNX: %v %v", ok, err)
	}
	forged := "taken:" + strconv.Itoa(len(tok)) + ":" + tok + key
	for _, c := range []struct {
		src  string
		keys []string
		argv []any
		want string
	}{
		{"return redis.call('publish', ARGV[1], ARGV[2])", nil, []any{"lockproxy:released", forged}, "argument 1 is a channel"},
		{"return redis.call('publish', KEYS[1], ARGV[1])", []string{"lockproxy:released"}, []any{forged}, "could reach lockproxy's own keys"},
		{"return redis.call(ARGV[1], KEYS[1], ARGV[2])", []string{"lockproxy:released"}, []any{"publish", forged}, "could reach lockproxy's own keys"},
	} {
		for _, c2 := range []*redis.Client{attacker, newClient(t, one.Addr(), 2)} {
			err := c2.Eval(ctx, c.src, c.keys, c.argv...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), refusedPrefix) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("EVAL %q: %v, want a refusal containing %q", c.src, err, c.want)
			}
		}
	}
	// The holder keeps its lock: a forged notification would have made
	// its instance drop it within milliseconds (LOCKLOST on its next
	// command about the key).
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if v, err := holder.Get(ctx, key).Result(); v != tok || err != nil {
			t.Fatalf("holder's GET: %q %v, want its token", v, err)
		}
		if d, err := holder.PTTL(ctx, key).Result(); d != -1 || err != nil {
			t.Fatalf("holder's PTTL: %v %v, want -1 (bound, renewed)", d, err)
		}
	}
}

// TestScriptChannelsWithinUserPatterns: a user's scripts publish only on
// channels its key patterns allow, and derive keys only from keys that a
// pattern ending in * covers.
func TestScriptChannelsWithinUserPatterns(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Password = "root-pw"
	cfg.Users = []instance.UserConfig{
		{Name: "app", Password: "app-pw", Keys: []string{"app:*", "exact"}, Commands: "legacy"},
	}
	in := startInstance(t, cfg)
	ctx := t.Context()
	app := oneConn(t, in.Addr(), func(o *redis.Options) { o.Username, o.Password = "app", "app-pw" })
	publish := "return redis.call('publish', KEYS[1], ARGV[1])"
	wantErr(t, app.Eval(ctx, publish, []string{"other:chan"}, "m").Err(), "NOPERM No permissions to access a key")
	if n, err := app.Eval(ctx, publish, []string{"app:chan"}, "m").Int64(); n != 0 || err != nil {
		t.Fatalf("PUBLISH on a channel the user may use: %v %v", n, err)
	}
	derive := "return redis.call('GET', KEYS[1] .. ARGV[1])"
	wantErr(t, app.Eval(ctx, derive, []string{"exact"}, ":x").Err(), "NOPERM this script derives keys from 'exact'")
	if err := app.Eval(ctx, derive, []string{"app:k"}, ":x").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a derived key under app:*: %v", err)
	}
}

// TestScriptRandomResultsRefused: SPOP, and SRANDMEMBER or TIME in a
// script that writes, are refused before any node runs them; a script
// that only reads may use SRANDMEMBER, and gets the majority's reply.
func TestScriptRandomResultsRefused(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	ctx := t.Context()
	c := newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	for _, n := range nodes {
		if err := nodeClient(t, n).SAdd(ctx, key, "m1", "m2", "m3", "m4").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for src, want := range map[string]string{
		"return redis.call('SPOP', KEYS[1])":                                                                "SPOP may not be used, it removes a member picked at random",
		"local m = redis.call('SRANDMEMBER', KEYS[1]) return redis.call('SREM', KEYS[1], m)":                "SRANDMEMBER may not be used in a script that writes",
		"local t = redis.call('TIME') return redis.call('SET', KEYS[1] .. ':at', t[1])":                     "TIME may not be used in a script that writes",
		"local f = redis.call('HRANDFIELD', KEYS[1] .. ':h') return redis.call('HDEL', KEYS[1] .. ':h', f)": "HRANDFIELD may not be used in a script that writes",
	} {
		err := c.Eval(ctx, src, []string{key}).Err()
		if err == nil || !strings.HasPrefix(err.Error(), refusedPrefix) || !strings.Contains(err.Error(), want) {
			t.Errorf("EVAL %q: %v, want %q", src, err, want)
		}
	}
	for i, n := range nodes {
		if m := nodeClient(t, n).SCard(ctx, key).Val(); m != 4 {
			t.Errorf("node %d holds %d members, want 4", i, m)
		}
	}
	one := uniqueKey(t)
	for _, n := range nodes {
		nodeClient(t, n).SAdd(ctx, one, "only")
	}
	if v, err := c.Eval(ctx, "return redis.call('SRANDMEMBER', KEYS[1])", []string{one}).Text(); v != "only" || err != nil {
		t.Fatalf("read-only SRANDMEMBER: %q %v", v, err)
	}
}

// TestScriptTTLMakesBoundLockALease: a script's PEXPIRE on a lock bound to
// its connection turns it into a lease, as the PEXPIRE command does: its
// PTTL counts down and, once it ends, another client takes the key.
func TestScriptTTLMakesBoundLockALease(t *testing.T) {
	in, _ := startRedlock(t, 3)
	ctx := t.Context()
	key := uniqueKey(t)
	holder, other := oneConn(t, in.Addr()), newClient(t, in.Addr(), 2)
	if ok, err := holder.SetNX(ctx, key, "t", 0).Result(); !ok || err != nil {
		t.Fatalf("SETNX: %v %v", ok, err)
	}
	if n, err := other.Eval(ctx, "return redis.call('PEXPIRE', KEYS[1], ARGV[1])", []string{key}, 2000).Int64(); n != 1 || err != nil {
		t.Fatalf("script PEXPIRE: %v %v", n, err)
	}
	if d, err := holder.PTTL(ctx, key).Result(); err != nil || d <= 0 || d > 2*time.Second {
		t.Fatalf("PTTL after the script's PEXPIRE 2000: %v %v, want a lease of at most 2 s", d, err)
	}
	eventually(t, 20*time.Second, "another client takes the key once the script's TTL ended", func() bool {
		return other.SetArgs(ctx, key, "u", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err() == nil
	})
}

// TestLegacyDelNamesTheGrant: with legacy.del_from_any_connection off, a
// DEL from the connection whose lock expired does not release a later
// grant of the same key with the same value to another connection.
func TestLegacyDelNamesTheGrant(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Legacy.DelFromAnyConnection = false
	in := startInstance(t, cfg)
	ctx := t.Context()
	key := uniqueKey(t)
	a, b, third := oneConn(t, in.Addr()), oneConn(t, in.Addr()), newClient(t, in.Addr(), 2)
	if err := a.SetArgs(ctx, key, "1", redis.SetArgs{Mode: "NX", TTL: 300 * time.Millisecond}).Err(); err != nil {
		t.Fatal(err)
	}
	// B sets once A's lease ended (not in a loop racing the expiry: a
	// retried SET NX with the same value may leave a higher fence on one
	// node than its grant's, see the branch's report).
	ncs := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		ncs[i] = nodeClient(t, n)
	}
	eventually(t, 20*time.Second, "A's lease ends on every node", func() bool {
		for _, nc := range ncs {
			if nc.Exists(ctx, key).Val() != 0 {
				return false
			}
		}
		return true
	})
	if err := b.SetArgs(ctx, key, "1", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
		t.Fatalf("B's SET NX after A's lease ended: %v", err)
	}
	if n, err := a.Del(ctx, key).Result(); n != 0 || err != nil {
		t.Fatalf("A's DEL of B's grant: %v %v, want 0", n, err)
	}
	if err := third.SetArgs(ctx, key, "x", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a third client's SET NX: %v, want nil (B holds it)", err)
	}
	if n, err := b.Del(ctx, key).Result(); n != 1 || err != nil {
		t.Fatalf("B's own DEL: %v %v, want 1", n, err)
	}
}

// TestHugeTTLsAsRedis: TTLs Redis 7.0 accepts beyond what time.Duration
// holds (SET ... EXAT in the year 5138, a catalogued script's PX of
// 292,000 years) take the lock, capped at 100 years.
func TestHugeTTLsAsRedis(t *testing.T) {
	in, _ := startRedlock(t, 3)
	ctx := t.Context()
	c := newClient(t, in.Addr(), 2)
	nodeRedlockLock := `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])` // node-redlock v3, catalogued
	for _, take := range []func(key string) error{
		func(key string) error { return c.Do(ctx, "SET", key, "v", "NX", "EXAT", "99999999999").Err() },
		func(key string) error { return c.Do(ctx, "SET", key, "v", "NX", "EX", "9223372036854").Err() },
		func(key string) error {
			return c.Eval(ctx, nodeRedlockLock, []string{key}, "v", "9223372036854775").Err()
		},
	} {
		key := uniqueKey(t)
		if err := take(key); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if d := c.PTTL(ctx, key).Val(); d < 99*365*24*time.Hour {
			t.Errorf("%s: PTTL %v, want about 100 years", key, d)
		}
	}
}
