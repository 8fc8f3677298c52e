package instance_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/redis/go-redis/v9"
)

// listing sends LOCKPROXY args... and returns its entries as maps, from a
// RESP3 map or a RESP2 flat array alike.
func listing(t *testing.T, c *redis.Client, args ...any) []map[string]any {
	t.Helper()
	v, err := c.Do(t.Context(), append([]any{"LOCKPROXY"}, args...)...).Slice()
	if err != nil {
		t.Fatalf("LOCKPROXY %v: %v", args, err)
	}
	var out []map[string]any
	for _, e := range v {
		m := map[string]any{}
		switch e := e.(type) {
		case map[any]any:
			for k, x := range e {
				m[k.(string)] = x
			}
		case []any:
			for i := 0; i+1 < len(e); i += 2 {
				m[e[i].(string)] = e[i+1]
			}
		default:
			t.Fatalf("LOCKPROXY %v: entry %T %v", args, e, e)
		}
		out = append(out, m)
	}
	return out
}

// keysOf are the entries' keys, in order.
func keysOf(entries []map[string]any) []string {
	var keys []string
	for _, e := range entries {
		keys = append(keys, fmt.Sprint(e["key"]))
	}
	return keys
}

// TestLockproxyLocks: LOCKPROXY LOCKS lists the locks granted through the
// instance — a connection-bound one with its holder's client id, a lease
// with none — with fence, validity, binding and waiters, and a key held
// elsewhere only while a client waits for it; LOCKPROXY WAITERS lists the
// waiting client. No token appears, through go-redis or redis-cli. MATCH
// and COUNT narrow the listing, bad arguments get an error and the
// connection stays usable, and an ACL user sees only keys of its patterns.
// Both backends.
func TestLockproxyLocks(t *testing.T) { eachBackend(t, testLockproxyLocks) }

func testLockproxyLocks(t *testing.T, cfg instance.Config) {
	cfg.Password = "root-pw"
	cfg.Users = []instance.UserConfig{{Name: "alice", Password: "alice-pw", Keys: []string{"app:*"}, Commands: "native"}}
	// A minute-long bound lease: the listing is under test, not the
	// watchdog, and a loaded machine can take longer than the 1.5 s of
	// testConfig to grant or renew it (the bound lock went missing).
	cfg.Locks.BoundLeaseMS = 60000
	in := startInstance(t, cfg)
	ctx := t.Context()
	client := func(user, pass string, proto int, name string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: in.Addr(), Username: user, Password: pass, Protocol: proto,
			ClientName: name, MaxRetries: -1, PoolSize: 1, ReadTimeout: 30 * time.Second})
		t.Cleanup(func() { c.Close() })
		return c
	}
	root := client("", "root-pw", 3, "root")
	holder := client("", "root-pw", 2, "holder")
	waiter := client("", "root-pw", 2, "waiter")
	alice := client("alice", "alice-pw", 2, "alice")

	bound := "app:" + uniqueKey(t)
	lease := "other:" + uniqueKey(t)
	b := mustLock(t, holder, bound, "TOKEN", "secret-bound-token")
	l := mustLock(t, holder, lease, "PX", 60000, "TOKEN", "secret-lease-token")
	holderID, err := holder.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	waiterID, err := waiter.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	got := waitLock(waiter, lease, "WAIT", 60000, "TOKEN", "secret-waiter-token")
	eventually(t, 10*time.Second, "the waiter listed", func() bool { return len(listing(t, root, "WAITERS")) == 1 })

	locks := listing(t, root, "LOCKS")
	if fmt.Sprint(keysOf(locks)) != fmt.Sprint([]string{bound, lease}) {
		t.Fatalf("LOCKPROXY LOCKS keys %v, want [%s %s]", keysOf(locks), bound, lease)
	}
	want := []map[string]any{
		{"key": bound, "mode": "exclusive", "binding": "bound", "fence": b.fence, "client_id": holderID, "holder": "holder", "waiters": int64(0), "held_here": int64(1)},
		{"key": lease, "mode": "exclusive", "binding": "lease", "fence": l.fence, "client_id": nil, "holder": "holder", "waiters": int64(1), "held_here": int64(1)},
	}
	for i, w := range want {
		for k, v := range w {
			if locks[i][k] != v {
				t.Errorf("LOCKPROXY LOCKS %s: %s = %v (%T), want %v", locks[i]["key"], k, locks[i][k], locks[i][k], v)
			}
		}
		if v, _ := locks[i]["validity_ms"].(int64); v <= 0 || v > 60000 {
			t.Errorf("LOCKPROXY LOCKS %s: validity_ms %v", locks[i]["key"], locks[i]["validity_ms"])
		}
	}
	ws := listing(t, root, "WAITERS")
	if ws[0]["key"] != lease || ws[0]["client_id"] != waiterID {
		t.Errorf("LOCKPROXY WAITERS: %v, want key %s client_id %d", ws, lease, waiterID)
	}
	if w, _ := ws[0]["waited_ms"].(int64); w < 0 {
		t.Errorf("LOCKPROXY WAITERS: waited_ms %v", ws[0]["waited_ms"])
	}
	if k := keysOf(listing(t, root, "LOCKS", "MATCH", "other:*")); fmt.Sprint(k) != fmt.Sprint([]string{lease}) {
		t.Errorf("MATCH other:*: %v", k)
	}
	if k := keysOf(listing(t, root, "LOCKS", "COUNT", 1)); fmt.Sprint(k) != fmt.Sprint([]string{bound}) {
		t.Errorf("COUNT 1: %v", k)
	}

	// alice may touch app:* only: the lease and its waiter are not hers.
	if k := keysOf(listing(t, alice, "LOCKS")); fmt.Sprint(k) != fmt.Sprint([]string{bound}) {
		t.Errorf("alice's LOCKPROXY LOCKS: %v, want [%s]", k, bound)
	}
	if ws := listing(t, alice, "WAITERS"); len(ws) != 0 {
		t.Errorf("alice's LOCKPROXY WAITERS: %v, want none", ws)
	}

	// No token anywhere, as redis-cli prints it.
	out := strings.Join(redisCLI(t, in.Addr(), "LOCKPROXY LOCKS\nLOCKPROXY WAITERS\nLOCKPROXY HELP\n", "-a", "root-pw", "--no-auth-warning"), "\n")
	for _, tok := range []string{"secret-bound-token", "secret-lease-token", "secret-waiter-token"} {
		if strings.Contains(out, tok) {
			t.Fatalf("redis-cli output shows a token:\n%s", out)
		}
	}
	for _, s := range []string{bound, lease, "binding", "lease", "bound", "client_id", fmt.Sprint(holderID), "waited_ms"} {
		if !strings.Contains(out, s) {
			t.Fatalf("redis-cli output lacks %q:\n%s", s, out)
		}
	}

	for args, msg := range map[string]string{
		"LOCKS COUNT 0":     "ERR value is out of range, must be positive",
		"LOCKS MATCH":       "ERR syntax error",
		"LOCKS FOO bar":     "ERR syntax error",
		"NOSUCH":            "ERR unknown subcommand or wrong number of arguments for 'NOSUCH'. Try LOCKPROXY HELP.",
		"WAITERS COUNT abc": "ERR value is out of range, must be positive",
	} {
		a := []any{"LOCKPROXY"}
		for _, f := range strings.Fields(args) {
			a = append(a, f)
		}
		wantErr(t, root.Do(ctx, a...).Err(), msg)
	}
	if err := root.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the errors: %v", err)
	}

	// The lease released, the waiter holds it, bound to its connection.
	if n, err := root.Do(ctx, "UNLOCK", lease, "secret-lease-token").Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK: %d %v", n, err)
	}
	recv(t, got, 30*time.Second, "the waiter's grant")
	locks = listing(t, root, "LOCKS", "MATCH", lease)
	if len(locks) != 1 || locks[0]["binding"] != "bound" || locks[0]["client_id"] != waiterID || locks[0]["waiters"] != int64(0) {
		t.Fatalf("after the handoff: %v", locks)
	}
	if ws := listing(t, root, "WAITERS"); len(ws) != 0 {
		t.Fatalf("LOCKPROXY WAITERS after the handoff: %v", ws)
	}
}
