package upstream

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// waiting is a hold for a waiter that began to wait at since.
func waiting(token, id string, since time.Time) engine.Hold {
	h := hold(token, time.Minute)
	h.Waiter = &engine.Waiter{ID: id, Since: since, Keep: time.Minute}
	return h
}

// TestLineOrdersWaiters: refused waiters take places in the key's line; a
// free key goes to the oldest, not to a younger waiter nor to a client
// that does not wait; the oldest leaving lets the next one go.
func TestLineOrdersWaiters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		t0 := time.Now()
		mustAcquire(t, n, "k", hold("holder", time.Minute))
		for _, w := range []engine.Hold{waiting("young", "w2", t0.Add(time.Second)), waiting("old", "w1", t0)} {
			if c, err := n.Acquire(ctx, "k", w); err != nil || c.State != quorum.Taken {
				t.Fatalf("waiter while held: %+v %v", c, err)
			}
		}
		mustRelease(t, n, "k", "holder", true)
		check := func(h engine.Hold, want quorum.ClaimState) {
			t.Helper()
			if c, err := n.Acquire(ctx, "k", h); err != nil || c.State != want {
				t.Fatalf("%s: %+v %v, want state %d", h.Token, c, err, want)
			}
		}
		check(hold("passer-by", time.Minute), quorum.Taken) // waiters go first
		check(waiting("young", "w2", t0.Add(time.Second)), quorum.Taken)
		check(waiting("old", "w1", t0), quorum.Acquired) // the oldest, and it leaves the line
		mustRelease(t, n, "k", "old", true)
		if ok, err := n.leave(ctx, "k", "w2"); err != nil || !ok {
			t.Fatalf("leave: %v %v", ok, err)
		}
		check(hold("passer-by", time.Minute), quorum.Acquired) // the line is empty again
	})
}

// TestLinePlaceExpires: a waiter that stops trying loses its place after
// Keep, and the key is free for others again.
func TestLinePlaceExpires(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("holder", time.Minute))
		gone := waiting("gone", "w1", time.Now())
		gone.Waiter.Keep = 100 * time.Millisecond
		if c, err := n.Acquire(ctx, "k", gone); err != nil || c.State != quorum.Taken {
			t.Fatal(c, err)
		}
		mustRelease(t, n, "k", "holder", true)
		c, err := n.Acquire(ctx, "k", hold("other", time.Minute))
		if err != nil || c.State != quorum.Taken || c.Held <= 0 || c.Held > 100*time.Millisecond {
			t.Fatalf("while the place lasts: %+v %v (Held is how long it lasts)", c, err)
		}
		eventually(t, 5*time.Second, "the place expires", func() bool {
			c, err := n.Acquire(ctx, "k", hold("other", time.Minute))
			return err == nil && c.State == quorum.Acquired
		})
	})
}

// TestGonePlaceIsSkipped: a waiter whose place ran out is passed over
// while the line lasts for the waiters behind it: the next waiter takes
// the key, and a waiter first in line takes it whatever is behind it.
func TestGonePlaceIsSkipped(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		t0 := time.Now()
		mustAcquire(t, n, "k", hold("holder", time.Minute))
		gone := waiting("gone", "g", t0)
		gone.Waiter.Keep = 100 * time.Millisecond
		for _, w := range []engine.Hold{gone, waiting("live", "l", t0.Add(time.Second))} {
			if c, err := n.Acquire(ctx, "k", w); err != nil || c.State != quorum.Taken {
				t.Fatal(c, err)
			}
		}
		mustRelease(t, n, "k", "holder", true)
		eventually(t, 5*time.Second, "the gone waiter's place is passed over", func() bool {
			c, err := n.Acquire(ctx, "k", waiting("live", "l", t0.Add(time.Second)))
			return err == nil && c.State == quorum.Acquired
		})
		mustRelease(t, n, "k", "live", true)

		// First in line, with a gone place behind it. The place behind is
		// made gone by its deadline: a short keep would also cut the
		// line's own TTL, and the whole line would be gone.
		mustAcquire(t, n, "j", hold("holder", time.Minute))
		for _, w := range []engine.Hold{waiting("first", "f", t0), waiting("behind", "b", t0.Add(time.Second))} {
			if c, err := n.Acquire(ctx, "j", w); err != nil || c.State != quorum.Taken {
				t.Fatal(c, err)
			}
		}
		mustRelease(t, n, "j", "holder", true)
		line, deadlines := n.lineKeys("j")
		if err := raw.ZAddXX(ctx, deadlines, redis.Z{Score: 1, Member: "b"}).Err(); err != nil {
			t.Fatal(err)
		}
		if got := raw.ZRange(ctx, line, 0, -1).Val(); fmt.Sprint(got) != "[f b]" {
			t.Fatalf("line %v, want [f b]", got)
		}
		if c, err := n.Acquire(ctx, "j", waiting("first", "f", t0)); err != nil || c.State != quorum.Acquired {
			t.Fatalf("the first waiter: %+v %v", c, err)
		}
	})
}

// TestGrantPlacesTheNextWaiter: a waiter's grant puts the next waiter of
// its instance in line in the same step, ahead of later arrivals.
func TestGrantPlacesTheNextWaiter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		t0 := time.Now()
		first := waiting("first", "first", t0)
		first.Next = &engine.Waiter{ID: "second", Since: t0.Add(time.Millisecond), Keep: time.Minute}
		if c, err := n.Acquire(ctx, "k", first); err != nil || c.State != quorum.Acquired {
			t.Fatal(c, err)
		}
		// A later arrival elsewhere is refused and takes its place behind.
		if c, err := n.Acquire(ctx, "k", waiting("later", "later", t0.Add(time.Second))); err != nil || c.State != quorum.Taken {
			t.Fatal(c, err)
		}
		mustRelease(t, n, "k", "first", true)
		if c, err := n.Acquire(ctx, "k", waiting("later", "later", t0.Add(time.Second))); err != nil || c.State != quorum.Taken {
			t.Fatalf("the later arrival overtook the placed waiter: %+v %v", c, err)
		}
		if c, err := n.Acquire(ctx, "k", waiting("second", "second", t0.Add(time.Millisecond))); err != nil || c.State != quorum.Acquired {
			t.Fatalf("the placed waiter: %+v %v", c, err)
		}
	})
}

// TestReleaseDropsTheHoldersPlace: a waiter refused on this node (placed in
// line) but granted on others gives up its place here when it releases; a
// rollback keeps the place.
func TestReleaseDropsTheHoldersPlace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("old", time.Minute))
		w := waiting("w", "w", time.Now())
		if c, err := n.Acquire(ctx, "k", w); err != nil || c.State != quorum.Taken {
			t.Fatal(c, err)
		}
		mustRelease(t, n, "k", "old", true)
		rollback := make(quorum.Replies, 1)
		n.Do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "w", Rollback: true}, 0, rollback)
		if r := <-rollback; r.Err != nil {
			t.Fatal(r.Err)
		}
		if c, err := n.Acquire(ctx, "k", hold("passer-by", time.Minute)); err != nil || c.State != quorum.Taken {
			t.Fatalf("a rollback gave up the place: %+v %v", c, err)
		}
		mustRelease(t, n, "k", "w", false) // w holds nothing here, but its place goes
		if c, err := n.Acquire(ctx, "k", hold("passer-by", time.Minute)); err != nil || c.State != quorum.Acquired {
			t.Fatalf("the released holder's place stayed: %+v %v", c, err)
		}
	})
}

// TestReleaseLooksAtTheLineWhenItMust: a release skips the look at the
// key's line only where the releasing token holds the key and nobody took
// a place in line since its acquire found none (one command fewer a cycle
// and node). Where somebody did, the release still wakes the line and drops
// the token's own place: a waiter placed after a quiet grant, the holder
// placed behind itself by a fresh acquire, and a waiter placed while the
// hold's meta was lost (rewritten since by a renewal).
func TestReleaseLooksAtTheLineWhenItMust(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		ps := rawSubscribe(t, raw, defaultChannel)
		published := func(want string) {
			t.Helper()
			m, err := ps.ReceiveMessage(testCtx(t))
			if err != nil || m.Payload != want {
				t.Fatalf("release notification %v, %v; want %q", m, err, want)
			}
		}
		// A waiter placed after a quiet grant is woken.
		mustAcquire(t, n, "k", hold("a", time.Minute))
		if c, err := n.Acquire(ctx, "k", waiting("w", "w", time.Now())); err != nil || c.State != quorum.Taken {
			t.Fatal(c, err)
		}
		mustRelease(t, n, "k", "a", true)
		published("1:ak")
		if ok, err := n.leave(ctx, "k", "w"); err != nil || !ok {
			t.Fatalf("leave: %v %v", ok, err)
		}
		published("1:wk")

		// The holder placed behind itself (a fresh acquire of its own key)
		// gives up its place.
		mustAcquire(t, n, "k", hold("a", time.Minute))
		self := waiting("a", "a", time.Now())
		self.Fresh = true
		if c, err := n.Acquire(ctx, "k", self); err != nil || c.State != quorum.Taken {
			t.Fatal(c, err)
		}
		mustRelease(t, n, "k", "a", true)
		if got := raw.Exists(ctx, "lockproxy:line:k", "lockproxy:line-deadline:k").Val(); got != 0 {
			t.Fatalf("the holder's own place stayed after its release (%d keys)", got)
		}

		// A waiter placed while the meta was lost is woken after a renewal
		// wrote the meta again.
		mustAcquire(t, n, "k", hold("a", time.Minute))
		if err := raw.Del(ctx, "lockproxy:meta:k").Err(); err != nil {
			t.Fatal(err)
		}
		if c, err := n.Acquire(ctx, "k", waiting("w", "w", time.Now())); err != nil || c.State != quorum.Taken {
			t.Fatal(c, err)
		}
		if ttl, err := n.Extend(ctx, "k", "a", time.Minute, ""); err != nil || ttl != time.Minute {
			t.Fatalf("Extend = %v, %v", ttl, err)
		}
		mustRelease(t, n, "k", "a", true)
		published("1:ak")
		if ok, err := n.leave(ctx, "k", "w"); err != nil || !ok {
			t.Fatalf("leave: %v %v", ok, err)
		}
		published("1:wk")

		// Nobody in line: the cycle looks at the line once, in the acquire.
		if raw.ConfigResetStat(ctx).Err() != nil {
			return // miniredis counts no commands
		}
		mustAcquire(t, n, "q", hold("a", time.Minute))
		mustRelease(t, n, "q", "a", true)
		stats := raw.Info(ctx, "commandstats").Val()
		if !strings.Contains(stats, "cmdstat_exists:calls=1,") {
			t.Errorf("EXISTS calls over an uncontended cycle, want 1 (the acquire's):\n%s", stats)
		}
	})
}

// TestContendedGrantCommands: a grant handed down a line (the holder's
// release, then its instance's first waiter's acquire, which places the
// next waiter) runs 4 and 13 commands in its scripts on a node, besides
// the two EVALSHA: the line is read once in each script, and the node's
// counter only by the take's INCR. The replies are those of
// TestLineOrdersWaiters and TestReleasePublishes; this holds the count.
func TestContendedGrantCommands(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n, ctx, raw := newNode(t, RedisOptions{Addr: s.Addr()}), testCtx(t), rawClient(t, s.Addr())
	t0 := time.Now()
	mustAcquire(t, n, "k", hold("a", time.Minute))
	w1 := waiting("w1", "w1", t0)
	if c, err := n.Acquire(ctx, "k", w1); err != nil || c.State != quorum.Taken {
		t.Fatal(c, err)
	}
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mine := []engine.Waiter{{ID: "w1"}, {ID: "w2"}}
	if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", Line: mine}); r.Err != nil || !r.OK {
		t.Fatalf("release: %+v", r)
	}
	w1.Next = &engine.Waiter{ID: "w2", Since: t0.Add(time.Millisecond), Keep: time.Minute}
	if c, err := n.Acquire(ctx, "k", w1); err != nil || c.State != quorum.Acquired {
		t.Fatalf("w1: %+v %v", c, err)
	}
	info := raw.Info(ctx, "commandstats").Val()
	var inner, scripts int64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":calls=")
		if !ok || strings.HasSuffix(name, "|resetstat") {
			continue
		}
		calls, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval":
			scripts += calls
		case "cmdstat_time":
		default:
			inner += calls
		}
	}
	if scripts < 1 || inner != 4+12 {
		t.Errorf("a contended grant ran %d commands besides TIME in %d script calls, want 16 (4 + 12):\n%s", inner, scripts, info)
	}
	if c, err := n.Acquire(ctx, "k", waiting("w2", "w2", t0.Add(time.Millisecond))); err != nil || c.State != quorum.Taken {
		t.Fatalf("w2 while w1 holds: %+v %v", c, err)
	}
}
