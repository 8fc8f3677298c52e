package upstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// testTimeout bounds every call a test makes.
const testTimeout = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newNode connects a RedisNode to addr and closes it when the test ends.
func newNode(t *testing.T, o RedisOptions) *RedisNode {
	t.Helper()
	n := NewRedisNode(o)
	t.Cleanup(func() { n.Close() })
	return n
}

// rawClient talks to a node directly, to look behind the scripts.
func rawClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return c
}

// heldOn waits until each node at addrs holds key for token. Acquire
// returns once a majority granted; a test that then kills or changes a
// node must first know that the node's own grant was not still on its way.
func heldOn(t *testing.T, key, token string, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		raw := rawClient(t, addr)
		eventually(t, testTimeout, "node "+addr+" holds "+key+" for "+token, func() bool {
			v, err := raw.Get(t.Context(), key).Result()
			return err == nil && v == token
		})
	}
}

// startEmbedded starts n miniredis nodes and closes them when the test ends.
func startEmbedded(t *testing.T, n int) *Embedded {
	t.Helper()
	e, err := StartEmbedded(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// forEachBackend runs f against a real redis-server and an embedded
// miniredis node.
func forEachBackend(t *testing.T, f func(t *testing.T, addr string)) {
	t.Run("redis", func(t *testing.T) {
		f(t, redistest.Start(t, redistest.Options{}).Addr())
	})
	t.Run("miniredis", func(t *testing.T) {
		f(t, startEmbedded(t, 1).Addrs()[0])
	})
}

func hold(token string, ttl time.Duration) engine.Hold {
	return engine.Hold{Token: token, TTL: ttl, Mode: engine.Lease, Name: "client-" + token}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metaFields are the fields of a lock's meta, in meta.lua's order.
var metaFields = []string{"token", "fence", "mode", "name", "ttl", "attempt", "took", "lined"}

// encodeMeta writes m as meta.lua's encode does: each field as its length,
// ':' and its bytes.
func encodeMeta(m map[string]string) string {
	var b strings.Builder
	for _, f := range metaFields {
		fmt.Fprintf(&b, "%d:%s", len(m[f]), m[f])
	}
	return b.String()
}

// decodeMeta reads a meta that encodeMeta (or meta.lua) wrote.
func decodeMeta(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, f := range metaFields {
		n, rest, ok := strings.Cut(s, ":")
		l, err := strconv.Atoi(n)
		if !ok || err != nil || l < 0 || l > len(rest) {
			return nil, fmt.Errorf("meta field %s unreadable in %q", f, s)
		}
		m[f], s = rest[:l], rest[l:]
	}
	if s != "" {
		return nil, fmt.Errorf("meta has %q left over", s)
	}
	return m, nil
}

// readMeta reads the meta of key on the node behind raw.
func readMeta(ctx context.Context, raw *redis.Client, key string) (map[string]string, error) {
	s, err := raw.Get(ctx, DefaultPrefix+"meta:"+key).Result()
	if err != nil {
		return nil, err
	}
	return decodeMeta(s)
}

// nodeCounter reads the node's fencing counter: the layout key (layout 3).
func nodeCounter(ctx context.Context, raw *redis.Client) (int64, error) {
	return raw.Get(ctx, DefaultPrefix+"layout").Int64()
}

// setMeta changes one field of key's meta on the node behind raw, keeping
// its TTL.
func setMeta(t *testing.T, raw *redis.Client, key, field, value string) {
	t.Helper()
	m, err := readMeta(t.Context(), raw, key)
	if err != nil {
		t.Fatal(err)
	}
	m[field] = value
	if err := raw.SetArgs(t.Context(), DefaultPrefix+"meta:"+key, encodeMeta(m), redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
}
