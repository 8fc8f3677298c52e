package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/redis/go-redis/v9"
)

// embeddedConfig is an embedded-backend config on a free loopback port.
func embeddedConfig() instance.Config {
	cfg := testConfig(nil)
	cfg.Backend = "embedded"
	return cfg
}

// TestSelectNamespaces locks one key name in databases 0 and 1 through
// go-redis clients configured with Options.DB (which send SELECT on each
// new connection): the two locks are independent, on every backend.
func TestSelectNamespaces(t *testing.T) {
	check := func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := uniqueKey(t)
		for _, proto := range []int{2, 3} {
			db0 := newClient(t, in.Addr(), proto)
			db1 := redis.NewClient(&redis.Options{Addr: in.Addr(), Protocol: proto, DB: 1, MaxRetries: -1})
			t.Cleanup(func() { db1.Close() })
			if ok, err := db1.SetNX(ctx, key, "one", time.Minute).Result(); !ok || err != nil {
				t.Fatalf("resp%d: SET NX in db 1: %v %v", proto, ok, err)
			}
			if ok, err := db0.SetNX(ctx, key, "zero", time.Minute).Result(); !ok || err != nil {
				t.Fatalf("resp%d: SET NX in db 0 beside db 1's lock: %v %v", proto, ok, err)
			}
			if ok, err := db1.SetNX(ctx, key, "again", time.Minute).Result(); ok || err != nil {
				t.Fatalf("resp%d: a second SET NX in db 1 took a held lock: %v %v", proto, ok, err)
			}
			if v, err := db1.Get(ctx, key).Result(); v != "one" || err != nil {
				t.Fatalf("resp%d: GET in db 1: %q %v", proto, v, err)
			}
			if n, err := db0.Del(ctx, key).Result(); n != 1 || err != nil {
				t.Fatalf("resp%d: DEL in db 0: %d %v", proto, n, err)
			}
			if v, err := db1.Get(ctx, key).Result(); v != "one" || err != nil {
				t.Fatalf("resp%d: db 0's DEL released db 1's lock: %q %v", proto, v, err)
			}
			if n, err := db1.Del(ctx, key).Result(); n != 1 || err != nil {
				t.Fatalf("resp%d: DEL in db 1: %d %v", proto, n, err)
			}
		}
	}
	eachBackend(t, check)
	t.Run("embedded", func(t *testing.T) { check(t, embeddedConfig()) })
}

// TestSelectKeyLayout checks what the nodes hold: database 0's key as the
// client named it, database n's under "lockproxy:db<n>:", and that CLIENT
// INFO shows the selected database.
func TestSelectKeyLayout(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := uniqueKey(t)
	c := redis.NewClient(&redis.Options{Addr: in.Addr(), DB: 7, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	if err := c.SetNX(ctx, key, "tok", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if info, err := c.ClientInfo(ctx).Result(); err != nil || info.DB != 7 {
		t.Fatalf("CLIENT INFO after SELECT 7: %+v %v", info, err)
	}
	for _, n := range nodes {
		node := redis.NewClient(&redis.Options{Addr: n.Addr()})
		defer node.Close()
		// SET NX answers once a majority granted; the last node's grant may
		// still be on its way.
		var named []string
		eventually(t, 10*time.Second, "node "+n.Addr()+" holds a key named "+key, func() bool {
			named, _ = node.Keys(ctx, "*"+key+"*").Result()
			return len(named) > 0
		})
		for _, k := range named {
			if !strings.Contains(k, "lockproxy:db7:"+key) {
				t.Errorf("node %s holds %q: db 7's key without its prefix", n.Addr(), k)
			}
		}
	}
}

// TestWaitAOF checks WAITAOF's answers (the plain redis-server of the
// scenario tests predates WAITAOF): [0, 0] without numlocal, Redis's
// refusal with it, Redis's errors for bad numbers, and a usable connection
// after each.
func TestWaitAOF(t *testing.T) {
	in := startInstance(t, embeddedConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: in.Addr(), MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	if v, err := c.Do(ctx, "WAITAOF", 0, 0, 0).Slice(); err != nil || len(v) != 2 || v[0] != int64(0) || v[1] != int64(0) {
		t.Fatalf("WAITAOF 0 0 0: %v %v", v, err)
	}
	if v, err := c.Do(ctx, "WAITAOF", 0, 1, 10).Slice(); err != nil || len(v) != 2 || v[1] != int64(0) {
		t.Fatalf("WAITAOF 0 1 10: %v %v", v, err)
	}
	for args, want := range map[[3]string]string{
		{"1", "0", "0"}:  "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.",
		{"x", "0", "0"}:  "ERR value is not an integer or out of range",
		{"0", "x", "0"}:  "ERR value is not an integer or out of range",
		{"0", "0", "-1"}: "ERR timeout is negative",
		{"-1", "0", "0"}: "ERR value is out of range, must be positive",
		{"0", "-1", "0"}: "ERR value is out of range, must be positive",
	} {
		err := c.Do(ctx, "WAITAOF", args[0], args[1], args[2]).Err()
		if err == nil || err.Error() != want {
			t.Errorf("WAITAOF %v: %v, want %s", args, err, want)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after WAITAOF %v: %v", args, err)
		}
	}
	if err := c.Do(ctx, "WAITAOF", 0, 0).Err(); err == nil || err.Error() != "ERR wrong number of arguments for 'waitaof' command" {
		t.Errorf("WAITAOF 0 0: %v", err)
	}
}
