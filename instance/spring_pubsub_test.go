package instance_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSpringPubSubLockReplay replays Spring Integration's RedisLockRegistry
// in PUB_SUB_LOCK mode (RedisPubSubLock, 6.4 and main): the obtain, renew
// and UNLINK unlock scripts of lockproxy's catalogue (the same bytes, see
// luascript/scripts/SOURCES.md), sent as Spring Data Redis sends a
// RedisScript (EVALSHA, EVAL on NOSCRIPT), with KEYS [registryKey:path] and
// ARGV [clientId, expireAfter] or [clientId, registryKey-channel], and the
// waiter's SUBSCRIBE to registryKey-channel, woken by a message whose
// payload is the lock key. Two clients, each its own "JVM" (clientId); run
// on the same targets as the Redisson replays.
func TestSpringPubSubLockReplay(t *testing.T) {
	for _, tg := range rTargets {
		t.Run(tg.name, func(t *testing.T) {
			addrA, addrB, _ := tg.addrs(t)
			a := newSpringClient(t, addrA, "0d6a6c1e-5f1b-4c55-9c7e-a1b2c3d4e5f6")
			b := newSpringClient(t, addrB, "7e3f0b2a-1c4d-4e6f-8a9b-f6e5d4c3b2a1")
			springPubSubCase(t, a, b)
		})
	}
}

// springExpireAfterMS is RedisLockRegistry's default expireAfter.
const springExpireAfterMS = 60000

// springClient is one RedisLockRegistry (its clientId) on its own
// connections.
type springClient struct {
	t        *testing.T
	c        *redis.Client
	clientID string
}

func newSpringClient(t *testing.T, addr, id string) *springClient {
	return &springClient{t: t, c: newClient(t, addr, 2), clientID: id}
}

// script is a catalogued Spring Integration script's bytes.
func springScript(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile("../luascript/scripts/spring-integration/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// execute is RedisTemplate.execute(RedisScript<Boolean>, keys, args...):
// EVALSHA, then EVAL on NOSCRIPT (ScriptUtils). A Lua true is 1, false is
// nil; Spring reads them as TRUE and FALSE (null).
func (s *springClient) execute(ctx context.Context, file string, keys []string, args ...any) (bool, error) {
	src := springScript(s.t, file)
	sum := sha1.Sum([]byte(src))
	v, err := s.c.EvalSha(ctx, hex.EncodeToString(sum[:]), keys, args...).Result()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		v, err = s.c.Eval(ctx, src, keys, args...).Result()
	}
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	case v == int64(1):
		return true, nil
	}
	return false, fmt.Errorf("script reply %#v, want 1 or nil", v)
}

func (s *springClient) obtain(ctx context.Context, key string) (bool, error) {
	return s.execute(ctx, "obtain-6.4.lua", []string{key}, s.clientID, fmt.Sprint(springExpireAfterMS))
}

func (s *springClient) renew(ctx context.Context, key string) (bool, error) {
	return s.execute(ctx, "renew-6.4.lua", []string{key}, s.clientID, fmt.Sprint(springExpireAfterMS))
}

func (s *springClient) unlock(ctx context.Context, key, channel string) (bool, error) {
	return s.execute(ctx, "pubsub-unlink-unlock-6.4.lua", []string{key}, s.clientID, channel)
}

func springPubSubCase(t *testing.T, a, b *springClient) {
	ctx := compatCtx(t)
	registry := "spring:" + uniqueKey(t)
	key, channel := registry+":orders", registry+"-channel"
	ok, err := a.obtain(ctx, key)
	want(t, "A obtain", ok, err, true)
	ok, err = a.obtain(ctx, key)
	want(t, "A obtain again (same clientId: re-entry extends)", ok, err, true)
	ok, err = b.obtain(ctx, key)
	want(t, "B obtain while A holds", ok, err, false)
	// B: subscribeLock: the listener container subscribes, then obtains
	// again before waiting.
	ps := b.c.Subscribe(ctx, channel)
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("SUBSCRIBE %s: %v", channel, err)
	}
	ok, err = b.obtain(ctx, key)
	want(t, "B obtain after subscribing", ok, err, false)
	ok, err = a.renew(ctx, key)
	want(t, "A renew", ok, err, true)
	ok, err = b.renew(ctx, key)
	want(t, "B renew of A's lock", ok, err, false)
	ok, err = b.unlock(ctx, key, channel)
	want(t, "B unlock of A's lock", ok, err, false)
	start := time.Now()
	done := compatReleaseLater(func() error {
		ok, err := a.unlock(ctx, key, channel)
		if err != nil || !ok {
			return fmt.Errorf("A unlock: %v %v", ok, err)
		}
		return nil
	})
	msg, got := awaitMessage(ps, compatWaitBound)
	compatWaitRelease(t, done)
	if !got || msg != key {
		t.Fatalf("B: unlock message %q %v, want the lock key %q", msg, got, key)
	}
	ok, err = b.obtain(ctx, key)
	want(t, "B obtain after the message", ok, err, true)
	if el := time.Since(start); el >= springExpireAfterMS*time.Millisecond {
		t.Fatalf("B obtained %v after waiting, not before A's lease ran out", el)
	}
	pttl, err := a.c.PTTL(ctx, key).Result()
	if err != nil || pttl <= 0 || pttl > springExpireAfterMS*time.Millisecond {
		t.Fatalf("PTTL while B holds: %v %v", pttl, err)
	}
	ok, err = a.unlock(ctx, key, channel)
	want(t, "A unlock after losing it (ConcurrentModificationException)", ok, err, false)
	ok, err = b.unlock(ctx, key, channel)
	want(t, "B unlock", ok, err, true)
	if msg, got := awaitMessage(ps, compatWaitBound); !got || msg != key {
		t.Fatalf("B's own unlock message: %q %v, want %q", msg, got, key)
	}
	n, err := a.c.Exists(ctx, key).Result()
	want(t, "EXISTS after unlock", n, err, int64(0))
}
