package clockshim_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestStepsRedisTimeAndExpiry starts a real redis-server under the shim and
// steps its clock: TIME moves by the step, and a key with 10 s to live is
// gone after a +11 s step; a step back brings TIME back.
func TestStepsRedisTimeAndExpiry(t *testing.T) {
	s, clock := clockshim.StartRedis(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	skew := func() time.Duration {
		t.Helper()
		before := time.Now()
		v, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v.Sub(before)
	}
	if d := skew(); d < -time.Second || d > time.Second {
		t.Fatalf("redis TIME is %v off before any step", d)
	}
	if err := c.Set(ctx, "k", "v", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := clock.Step(11 * time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for skew() < 10*time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("redis TIME did not step +11s: %v", skew())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("key with 10s to live still exists after a +11s step: %d %v", n, err)
	}
	if _, err := clock.Step(-31 * time.Second); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for skew() > -19*time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("redis TIME did not step back: %v", skew())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
