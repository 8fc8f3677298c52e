package upstream

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on acquire.lua and release.lua as trimmed to read the node's
// counter only where a reply needs it and the line once.

// keySpace is every key on the node: its type, value and whether it has a
// TTL, for comparing a node before and after a script.
func keySpace(t *testing.T, ctx context.Context, raw *redis.Client) map[string]string {
	t.Helper()
	keys, err := raw.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		var v any
		typ := raw.Type(ctx, k).Val()
		switch typ {
		case "string":
			v = raw.Get(ctx, k).Val()
		case "hash":
			v = raw.HGetAll(ctx, k).Val()
		case "zset":
			v = raw.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "list":
			v = raw.LRange(ctx, k, 0, -1).Val()
		case "set":
			m := raw.SMembers(ctx, k).Val()
			sort.Strings(m)
			v = m
		}
		out[k] = fmt.Sprintf("%s %v ttl=%v", typ, v, raw.PTTL(ctx, k).Val() > 0)
	}
	return out
}

// TestAttackLaterLayoutWritesNothing: a node whose layout key has a type
// of a later layout (any but string and hash) makes every acquire fail
// before it writes anything, on every path of the script: the quiet one,
// a refresh of its own hold, a fresh acquire of its own key, an undone
// attempt, a refusal that places the waiter, a free key whose line starts
// with gone places (purged only after the counter was read), a waiter
// first in line with gone places behind it, one whose own place is gone,
// a release mark to raise, and a grant that places the next waiter.
func TestAttackLaterLayoutWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		const key, tok = "k", "t"
		line, deadlines := n.lineKeys(key)
		now := func() int64 { return raw.Time(ctx).Val().UnixMicro() }
		place := func(id string, arrival, deadline int64) {
			raw.ZAdd(ctx, line, redis.Z{Score: float64(arrival), Member: id})
			raw.ZAdd(ctx, deadlines, redis.Z{Score: float64(deadline), Member: id})
			raw.PExpire(ctx, line, time.Hour)
			raw.PExpire(ctx, deadlines, time.Hour)
		}
		t0 := time.Now()
		wait := func(next bool) engine.Hold {
			h := waiting(tok, tok, t0)
			if next {
				h.Next = &engine.Waiter{ID: "n", Since: t0.Add(time.Millisecond), Keep: time.Minute}
			}
			return h
		}
		fresh := hold(tok, time.Minute)
		fresh.Fresh = true
		cases := []struct {
			name  string
			setup func()
			h     engine.Hold
		}{
			{"quiet", func() {}, hold(tok, time.Minute)},
			{"quiet on a held key", func() { raw.Set(ctx, key, "other", time.Hour) }, hold(tok, time.Minute)},
			{"refresh", func() {
				raw.Set(ctx, key, tok, time.Hour)
				raw.Set(ctx, n.metaKey(key), encodeMeta(map[string]string{"token": tok, "fence": "7", "lined": "1"}), time.Hour)
			}, hold(tok, time.Minute)},
			{"refresh without meta", func() { raw.Set(ctx, key, tok, time.Hour) }, wait(true)},
			{"fresh on its own key", func() { raw.Set(ctx, key, tok, time.Hour) }, fresh},
			{"undone", func() { raw.Set(ctx, n.undoKey("att"), "1", time.Hour) }, wait(false)},
			{"refused waiter", func() {
				raw.Set(ctx, key, "other", time.Hour)
				raw.Set(ctx, n.metaKey(key), encodeMeta(map[string]string{"token": "other", "fence": "7", "lined": "0"}), time.Hour)
			}, wait(false)},
			{"gone places first", func() { place("g", 1, 1); place("b", 2, now()+3600e6) }, wait(false)},
			{"gone places only", func() { place("g", 1, 1) }, hold(tok, time.Minute)},
			{"first, gone behind", func() { place(tok, t0.UnixMicro(), now()+3600e6); place("g", t0.UnixMicro()+1, 1) }, wait(true)},
			{"first and gone", func() { place(tok, t0.UnixMicro(), 1); place("b", t0.UnixMicro()+1, now()+3600e6) }, wait(false)},
			{"release mark", func() { place(tok, t0.UnixMicro(), now()+3600e6); raw.Set(ctx, n.releasedKey(key), "5", time.Hour) }, wait(false)},
			{"next waiter", func() {}, wait(true)},
		}
		later := map[string]func(){
			"list": func() { raw.RPush(ctx, n.layoutKey(), "4") },
			"set":  func() { raw.SAdd(ctx, n.layoutKey(), "4") },
			"zset": func() { raw.ZAdd(ctx, n.layoutKey(), redis.Z{Score: 4, Member: "fence"}) },
		}
		for kind, layout := range later {
			for _, c := range cases {
				if err := raw.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				layout()
				raw.HSet(ctx, n.prefix+"fence-floor", "layout", "4")
				raw.HSet(ctx, n.prefix+"fence-max", "layout", "4")
				c.setup()
				before := keySpace(t, ctx, raw)
				r := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: key, Hold: c.h, Attempt: "att"})
				if r.Err == nil || !strings.Contains(r.Err.Error(), "WRONGTYPE") {
					t.Errorf("%s, layout key a %s: %+v, want WRONGTYPE", c.name, kind, r)
				}
				if after := keySpace(t, ctx, raw); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Errorf("%s, layout key a %s: the acquire wrote\nbefore %v\nafter  %v", c.name, kind, before, after)
				}
			}
		}
		if err := raw.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAttackFirstWaiterWithGonePlaceTakes: a waiter first in line whose own
// place ran out (its instance did not ask again within the place's keep)
// takes the free key when it asks, though a live waiter is behind it:
// where its place was purged first, it would be refused and placed again
// at its own arrival, first again, and take the key on its next ask.
func TestAttackFirstWaiterWithGonePlaceTakes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		t0 := time.Now()
		mustAcquire(t, n, "k", hold("holder", time.Minute))
		for _, w := range []engine.Hold{waiting("first", "f", t0), waiting("behind", "b", t0.Add(time.Second))} {
			if c, err := n.Acquire(ctx, "k", w); err != nil || c.State != quorum.Taken {
				t.Fatal(c, err)
			}
		}
		mustRelease(t, n, "k", "holder", true)
		// The first place's deadline passed (a short keep would also
		// shorten the line's own TTL, and the places behind with it).
		line, deadlines := n.lineKeys("k")
		if err := raw.ZAddXX(ctx, deadlines, redis.Z{Score: 1, Member: "f"}).Err(); err != nil {
			t.Fatal(err)
		}
		c, err := n.Acquire(ctx, "k", waiting("first", "f", t0))
		if err != nil || c.State != quorum.Acquired {
			t.Fatalf("the first waiter, its place gone: %+v %v", c, err)
		}
		if got := raw.ZRange(ctx, line, 0, -1).Val(); fmt.Sprint(got) != "[b]" {
			t.Errorf("line %v, want [b]", got)
		}
		if c, err := n.Acquire(ctx, "k", waiting("behind", "b", t0.Add(time.Second))); err != nil || c.State != quorum.Taken {
			t.Fatalf("the waiter behind: %+v %v", c, err)
		}
	})
}

// TestAttackReleaseWithOneWaiterTwice: a release whose instance names the
// same waiter as its first and second (two of its clients waiting with one
// TOKEN) still publishes while another instance's waiter is in line: the
// one place in line is not counted off twice.
func TestAttackReleaseWithOneWaiterTwice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		ps := rawSubscribe(t, raw, defaultChannel)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		for _, id := range []string{"w", "o"} {
			if c, err := n.Acquire(ctx, "k", waiting(id, id, time.Now())); err != nil || c.State != quorum.Taken {
				t.Fatal(c, err)
			}
		}
		twice := []engine.Waiter{{ID: "w"}, {ID: "w"}}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", Line: twice}); r.Err != nil || !r.OK {
			t.Fatalf("release: %+v", r)
		}
		if err := raw.Publish(ctx, defaultChannel, "end").Err(); err != nil {
			t.Fatal(err)
		}
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Payload != "1:ak" {
			t.Errorf("message %q, want the release (1:ak): o waits on another instance", m.Payload)
		}
	})
}

// TestAttackFencesRiseAcrossLinesAndLayouts: random acquires (waiting or
// not, fresh or not, placing a next waiter or not), releases, places run
// out, leases ended and the node's counter put back into layout 2's hash
// or layout 1's fence-max: every grant's fence is above every earlier one,
// a refresh answers its grant's fence, and no reply's counter is below the
// last fence. A take counts before it writes, a quiet take that finds the
// key held counts back: neither may hand out a fence twice.
func TestAttackFencesRiseAcrossLinesAndLayouts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		rng := rand.New(rand.NewSource(7))
		toks := []string{"a", "b", "c", "d"}
		t0 := time.Now()
		since := map[string]time.Time{}
		for i, tk := range toks {
			since[tk] = t0.Add(time.Duration(i) * time.Millisecond)
		}
		var last int64
		fenceOf := map[string]int64{}
		line, deadlines := n.lineKeys("k")
		grants := 0
		for i := range 2000 {
			tk := toks[rng.Intn(len(toks))]
			switch rng.Intn(6) {
			case 0, 1, 2:
				h := hold(tk, time.Minute)
				if rng.Intn(2) == 0 {
					h = waiting(tk, tk, since[tk])
				}
				if rng.Intn(3) == 0 {
					nx := toks[rng.Intn(len(toks))]
					h.Next = &engine.Waiter{ID: nx, Since: since[nx], Keep: time.Minute}
				}
				h.Fresh = rng.Intn(4) == 0
				c, err := n.Acquire(ctx, "k", h)
				if err != nil {
					t.Fatal(err)
				}
				switch c.State {
				case quorum.Acquired:
					if c.Fence <= last {
						t.Fatalf("step %d: fence %d after %d", i, c.Fence, last)
					}
					last, fenceOf[tk] = c.Fence, c.Fence
					grants++
				case quorum.Mine:
					if c.Fence != fenceOf[tk] {
						t.Fatalf("step %d: a refresh answers fence %d, its grant's was %d", i, c.Fence, fenceOf[tk])
					}
				}
				if c.Counter < last {
					t.Fatalf("step %d: counter %d below the last fence %d (%+v)", i, c.Counter, last, c)
				}
			case 3:
				if _, err := n.Release(ctx, "k", tk); err != nil {
					t.Fatal(err)
				}
			case 4: // a place runs out
				if m := raw.ZRange(ctx, line, 0, -1).Val(); len(m) > 0 {
					raw.ZAddXX(ctx, deadlines, redis.Z{Score: 1, Member: m[rng.Intn(len(m))]})
				}
			case 5:
				if rng.Intn(10) == 0 {
					raw.Del(ctx, "k") // the lease ended
				}
				cur := raw.Get(ctx, n.layoutKey()).Val()
				if cur == "" {
					break
				}
				switch rng.Intn(8) {
				case 0: // layout 2's hash
					raw.Del(ctx, n.layoutKey())
					raw.HSet(ctx, n.layoutKey(), "fence", cur, "version", "2")
				case 1: // layout 1: no counter, fence-max at least every fence
					raw.Del(ctx, n.layoutKey(), n.prefix+"fence-floor", n.prefix+"fence-max")
					raw.Set(ctx, n.prefix+"fence-max", cur, 0)
					raw.Set(ctx, n.prefix+"fence-floor", "1", 0)
				}
			}
		}
		if grants < 50 {
			t.Fatalf("only %d grants in the run", grants)
		}
	})
}
