package upstream

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestCommitOnlyRaises (issue 24): a commit that lands after another one
// with a higher fence (an earlier attempt's, reordered) does not lower the
// fence recorded for the hold, though the token still holds the key.
func TestCommitOnlyRaises(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx := newNode(t, RedisOptions{Addr: addr}), testCtx(t)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		for _, fence := range []int64{5, 3} {
			if ok, err := n.Commit(ctx, "k", "a", fence); !ok || err != nil {
				t.Fatalf("Commit(%d) = %v, %v; want held", fence, ok, err)
			}
		}
		if e := mustInspect(t, n, "k"); e.Fence != 5 {
			t.Fatalf("fence %d after commits of 5 and then 3; want 5", e.Fence)
		}
	})
}

// TestLineDeadlinesOnNodeClock (issue 24): a waiter's place in line is
// kept, and purged, against the node's clock. An instance whose clock is an
// hour ahead (every timestamp it sends is) neither purges the place of a
// waiter another instance put in line nor takes the key before it.
func TestLineDeadlinesOnNodeClock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		w := hold("w", time.Minute)
		w.Waiter = &engine.Waiter{ID: "w", Since: time.Now(), Keep: 10 * time.Second}
		if c, err := n.Acquire(ctx, "k", w); err != nil || c.State != quorum.Taken {
			t.Fatalf("the waiter's Acquire = %+v, %v; want taken, in line", c, err)
		}
		mustRelease(t, n, "k", "a", true)

		script, keys, args := n.command(&quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("x", time.Minute), Attempt: "x-1"})
		v, err := raw.EvalSha(ctx, script.sha, keys, aheadBy(args, time.Hour)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if c, err := claim(v); err != nil || c.State != quorum.Taken {
			t.Fatalf("an acquire from a clock an hour ahead = %+v, %v; want taken (a waiter is first)", c, err)
		}
		if c, err := n.Acquire(ctx, "k", w); err != nil || c.State != quorum.Acquired {
			t.Fatalf("the waiter's next Acquire = %+v, %v; want acquired", c, err)
		}
	})
}

// aheadBy is args as an instance whose clock is d ahead sends them: every
// argument that is a time in microseconds near now is moved by d.
func aheadBy(args []any, d time.Duration) []any {
	now := time.Now().UnixMicro()
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
		if us, ok := a.(int64); ok && us > now-time.Minute.Microseconds() && us < now+time.Minute.Microseconds() {
			out[i] = strconv.FormatInt(us+d.Microseconds(), 10)
		}
	}
	return out
}

// TestUndoMarkOutlivesLease (issue 24): a rollback that finds its attempt
// not landed marks it undone for the lease and quorum.UndoGrace more, so
// that an acquire held back longer than its lease still takes nothing.
func TestUndoMarkOutlivesLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		op := &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", Rollback: true, Attempt: "a-1", Undo: "a-1", UndoFor: time.Second}
		if r := n.do(ctx, op); r.Err != nil || r.OK {
			t.Fatalf("rollback = %+v; want not held", r)
		}
		if ttl := raw.PTTL(ctx, "lockproxy:undone:a-1").Val(); ttl <= quorum.UndoGrace-10*time.Second {
			t.Fatalf("undo mark PTTL %v, want above %v", ttl, quorum.UndoGrace)
		}
		c := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Second), Attempt: "a-1"})
		if c.Err != nil || c.Claim.State != quorum.Taken {
			t.Fatalf("the undone attempt's late acquire = %+v; want it to take nothing", c)
		}
	})
}
