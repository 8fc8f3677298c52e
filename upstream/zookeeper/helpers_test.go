package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// testTimeout bounds every call a test makes.
const testTimeout = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
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

// releaseToW releases key held by T through z, in the background, handing
// it to z's waiter W; the channel gets its error (not held is one too).
func releaseToW(t *testing.T, z *ZooKeeper, key string) <-chan error {
	released := make(chan error, 1)
	go func() {
		ok, err := z.Release(testCtx(t), key, "T", []engine.Waiter{{ID: "W"}}, nil)
		if !ok && err == nil {
			err = errors.New("not released")
		}
		released <- err
	}()
	return released
}
