package upstream

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
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
		rollback := make(chan quorum.Reply, 1)
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
