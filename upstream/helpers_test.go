package upstream

import (
	"context"
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
