package upstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// A take of a lock key on a node raises the key's release mark
// (lockproxy:released:<key>) by one where there is one, so that a heal
// decided before it (heal.lua) takes nothing once that hold is gone:
// acquire.lua and heal.lua do, and so must the other writes that can put
// a token under a lock key, which run under a script's turn: the client's
// own script (GuardStated) and the repair of a drifted node (repair.lua).
// instance's TestAttackMarkClientScriptTakesAfterRenewal (the script's
// own take, after the renewal found the key free) and
// TestAttackMarkRepairRestoreAfterRenewal (the repair's RESTORE, after a
// renewal that found the key free once the script had run there) show
// what a missing raise does: each fails without its own raise,
// GuardStated's and repair.lua's, and passes without the other's.

// TestAttackMarkScriptRaisesTheMark: a script guarded by its turn raises
// the mark of each of its keys that has one, keeping the mark's TTL,
// before its body runs (a body that fails after its SET keeps the SET),
// and writes no mark where there was none; a mark that is not a number is
// left alone.
func TestAttackMarkScriptRaisesTheMark(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n := newNode(t, RedisOptions{Addr: addr})
		raw := rawClient(t, addr)
		raw.Set(ctx, "lockproxy:released:a", "1000", time.Minute)
		raw.Set(ctx, "lockproxy:released:c", "x", time.Minute)
		take := admitted(t, `redis.call('SET', KEYS[1], ARGV[1], 'PX', 30000) redis.call('SET', KEYS[2], ARGV[1], 'PX', 30000) `+
			`redis.call('SET', KEYS[3], ARGV[1], 'PX', 30000) if ARGV[2] == 'fail' then return redis.call('INCR', KEYS[1]) end return 1`)
		run := func(token string, args ...string) quorum.Reply {
			turnOp(ctx, n, quorum.OpTurn, []string{"a", "b", "c"}, token)
			defer turnOp(ctx, n, quorum.OpTurnBack, []string{"a", "b", "c"}, token)
			done := make(quorum.Replies, 1)
			n.Do(ctx, &quorum.Op{Kind: quorum.OpEval, Script: take, Keys: []string{"b", "a", "c", "a"}, Args: args, Turn: token, State: true}, 0, done)
			return <-done
		}
		if r := run("t1", "tok", ""); r.Err != nil || r.Value.Int != 1 {
			t.Fatalf("script: %+v", r)
		}
		if r := run("t2", "tok", "fail"); r.Err != nil || r.Value.Str == "" {
			t.Fatalf("failing script: %+v, want its error as the reply", r)
		}
		wantMark(t, raw, "a", "1002")
		if v, _ := raw.Exists(ctx, "lockproxy:released:b").Result(); v != 0 {
			t.Error("a script wrote a mark where there was none")
		}
		if v, _ := raw.Get(ctx, "lockproxy:released:c").Result(); v != "x" {
			t.Errorf("c's mark: %q, want it left alone", v)
		}
		for _, k := range []string{"a", "b", "c"} {
			if v, _ := raw.Get(ctx, k).Result(); v != "tok" {
				t.Errorf("%s: %q, want the script's tok", k, v)
			}
		}
	})
}

// TestAttackMarkRepairRaisesTheMark: a repair that RESTOREs a key raises
// its mark (keeping its TTL); one that deletes a key leaves the mark.
func TestAttackMarkRepairRaisesTheMark(t *testing.T) {
	ctx := testCtx(t)
	addr := redistest.Start(t, redistest.Options{}).Addr()
	n := newNode(t, RedisOptions{Addr: addr})
	raw := rawClient(t, addr)
	raw.Set(ctx, "src", "tok", 0)
	dump, err := raw.Dump(ctx, "src").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "gone"} {
		raw.Set(ctx, "lockproxy:released:"+k, "1000", time.Minute)
	}
	raw.Set(ctx, "gone", "x", 0)
	keys := []string{"a", "b", "gone"}
	turnOp(ctx, n, quorum.OpTurn, keys, "mine")
	done := make(quorum.Replies, 1)
	fix := []quorum.KeyState{{Known: true, Dump: dump, PTTL: 30000}, {Known: true, Dump: dump, PTTL: 30000}, {Known: true, PTTL: -2}}
	n.Do(ctx, &quorum.Op{Kind: quorum.OpRepair, Keys: keys, Fix: fix, Turn: "mine"}, 0, done)
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	if v, _ := raw.Get(ctx, "a").Result(); v != "tok" {
		t.Fatalf("a after the repair: %q", v)
	}
	wantMark(t, raw, "a", "1001")
	if v, _ := raw.Exists(ctx, "lockproxy:released:b").Result(); v != 0 {
		t.Error("the repair wrote a mark where there was none")
	}
	if v, _ := raw.Get(ctx, "lockproxy:released:gone").Result(); v != "1000" {
		t.Errorf("gone's mark after a DEL: %q, want 1000", v)
	}
	if r := turnOp(ctx, n, quorum.OpTurnBack, keys, "mine"); r.Err != nil && !errors.Is(r.Err, quorum.ErrTurnLost) {
		t.Fatal(r.Err)
	}
}

// TestAttackMarkAcquireAndHealRaiseTheMark: every path of acquire.lua that
// takes the key raises its release mark by one and keeps the mark's TTL —
// a plain take (the quiet path is skipped where a mark exists), the first
// waiter's take from the line, a take that places this instance's next
// waiter, a LOCK … TOKEN retry's take of a free key — and heal.lua's take
// raises it too, so that a second heal from the same renewal's moment
// takes nothing once the healed hold is gone. What takes nothing raises
// nothing: a refused acquire, a refresh of the token's own hold, an
// acquire its undo mark stops. A take where no mark exists writes none.
func TestAttackMarkAcquireAndHealRaiseTheMark(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n := newNode(t, RedisOptions{Addr: addr})
		raw := rawClient(t, addr)
		const markKey = "lockproxy:released:k"
		setMark := func(v string) { raw.Set(ctx, markKey, v, time.Minute) }
		mark := func(what, want string) {
			t.Helper()
			if v, _ := raw.Get(ctx, markKey).Result(); v != want {
				t.Errorf("%s: mark %q, want %q", what, v, want)
			}
			if p, _ := raw.PTTL(ctx, markKey).Result(); p <= 0 || p > time.Minute {
				t.Errorf("%s: mark TTL %v, want the minute it had", what, p)
			}
		}
		free := func() { raw.Del(ctx, "k", "lockproxy:meta:k") }

		mustAcquire(t, n, "k", hold("x", time.Minute)) // no mark: none written
		if v, _ := raw.Exists(ctx, markKey).Result(); v != 0 {
			t.Fatal("a take wrote a mark where there was none")
		}
		free()
		setMark("1000")
		mustAcquire(t, n, "k", hold("a", time.Minute))
		mark("plain take", "1001")
		if c, err := n.Acquire(ctx, "k", hold("a", time.Minute)); err != nil || c.State != quorum.Mine {
			t.Fatalf("a's refresh: %+v %v", c, err)
		}
		mark("refresh", "1001")
		if c, _ := n.Acquire(ctx, "k", hold("b", time.Minute)); c.State == quorum.Acquired {
			t.Fatal("b took a's key")
		}
		mark("refused", "1001")
		w := hold("w", time.Minute)
		w.Waiter = &engine.Waiter{ID: "w", Since: time.Now(), Keep: time.Minute}
		mustWait(t, n, "k", w)
		free()
		mustAcquire(t, n, "k", w)
		mark("the first waiter's take", "1002")
		free()
		nx := hold("c", time.Minute)
		nx.Next = &engine.Waiter{ID: "d", Since: time.Now(), Keep: time.Minute}
		mustAcquire(t, n, "k", nx)
		mark("a take that places the next waiter", "1003")
		free()
		raw.Del(ctx, "lockproxy:line:k", "lockproxy:line-deadline:k")
		retry := hold("a", time.Minute) // a LOCK … TOKEN retry: not fresh
		mustAcquire(t, n, "k", retry)
		mark("a retry's take", "1004")
		free()
		r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "u", Undo: "att-u", UndoFor: time.Minute, MarkFor: 0})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if c := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("u", time.Minute), Attempt: "att-u"}); c.Err != nil || c.Claim.State == quorum.Acquired {
			t.Fatalf("an undone attempt: %+v", c)
		}
		mark("an undone attempt", "1004")

		setMark("2000")
		now := time.Now().UnixMilli()
		heal := &quorum.Op{Kind: quorum.OpHeal, Key: "k", Hold: hold("h", time.Minute), Fence: 1, Attempt: "x", FreeAt: 2000, HealUntil: now + 60000}
		if r := n.do(ctx, heal); r.Err != nil || r.TTL <= 0 {
			t.Fatalf("heal: %+v", r)
		}
		mark("a heal's take", "2001")
		free()
		if r := n.do(ctx, heal); r.Err != nil || r.TTL > 0 {
			t.Fatalf("the same heal again, once the healed hold is gone: %+v, want nothing taken", r)
		}
	})
}

// wantMark checks key's release mark on the node: want, and still the TTL
// of about a minute it was written with.
func wantMark(t *testing.T, raw *redis.Client, key, want string) {
	t.Helper()
	ctx := context.Background()
	if v, _ := raw.Get(ctx, "lockproxy:released:"+key).Result(); v != want {
		t.Errorf("%s's mark: %q, want %s", key, v, want)
	}
	if p, _ := raw.PTTL(ctx, "lockproxy:released:"+key).Result(); p <= 0 || p > time.Minute {
		t.Errorf("%s's mark TTL: %v, want the minute it had", key, p)
	}
}
