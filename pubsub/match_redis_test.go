package pubsub

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// globAlphabet are the bytes the comparison builds keys and patterns of:
// every byte that means something to a glob, and two that do not.
const globAlphabet = `ab]-[^\`

// globKeys are every string of globAlphabet up to three bytes, and "".
func globKeys() []string {
	keys := []string{""}
	for n, prev := 0, []string{""}; n < 3; n++ {
		var next []string
		for _, p := range prev {
			for i := range len(globAlphabet) {
				next = append(next, p+globAlphabet[i:i+1])
			}
		}
		keys, prev = append(keys, next...), next
	}
	return keys
}

// globPatterns are hand-picked patterns and random ones of up to six bytes
// of globAlphabet, '*' and '?'.
func globPatterns() []string {
	pats := []string{"", "?", "*a", "a*", "[a-]", "[]", "[]a]", "[^]", "[^", "[", `\`, `a\`, `[\`, `[\]]`, "[a-", "*[",
		"[b-a]", "[]-a]", "[^a-]", `[a\-]`, "a[", "**a", "*?*", "[-]", "[--]", "[a-]]", "[[-]]"}
	rng := rand.New(rand.NewPCG(27, 4))
	const bytes = globAlphabet + "*?"
	for range 400 {
		p := make([]byte, 1+rng.IntN(6))
		for i := range p {
			p[i] = bytes[rng.IntN(len(bytes))]
		}
		pats = append(pats, string(p))
	}
	return pats
}

// TestMatchAsRedisKeys: for every pattern of globPatterns, KEYS on a real
// redis-server holding globKeys returns exactly the keys Match accepts.
// (KEYS * alone returns every key without matching: it is left out.)
func TestMatchAsRedisKeys(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute})
	defer c.Close()
	ctx := context.Background()
	keys := globKeys()
	for _, k := range keys {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range globPatterns() {
		if p == "*" {
			continue
		}
		got, err := c.Keys(ctx, p).Result()
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, k := range keys {
			if Match(p, k) {
				want = append(want, k)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("pattern %q: Redis's KEYS = %q, Match accepts %q", p, got, want)
		}
	}
}

// TestMatchAsRedisPSubscribe: a connection subscribed to patterns on a
// real redis-server receives a PUBLISH to each channel of globKeys once
// per pattern that Match says matches it ("*" included: Redis delivers
// nothing published to "" to it).
func TestMatchAsRedisPSubscribe(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute})
	defer c.Close()
	ctx := context.Background()
	pats := append([]string{"*"}, globPatterns()[:60]...)
	slices.Sort(pats)
	pats = slices.Compact(pats)
	ps := c.PSubscribe(ctx, pats...)
	defer ps.Close()
	for range pats {
		if _, err := ps.ReceiveTimeout(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range globKeys() {
		got, err := c.Publish(ctx, ch, "m").Result()
		if err != nil {
			t.Fatal(err)
		}
		want := int64(0)
		for _, p := range pats {
			if Match(p, ch) {
				want++
			}
		}
		if got != want {
			t.Errorf("channel %q: Redis delivered to %d patterns, Match accepts %d", ch, got, want)
		}
	}
}
