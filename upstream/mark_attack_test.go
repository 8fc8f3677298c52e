package upstream

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// A take of a lock key on a node raises the key's release mark
// (lockproxy:released:<key>) by one where there is one, so that a heal
// decided before it (heal.lua) takes nothing once that hold is gone:
// acquire.lua and heal.lua do, and so must the other writes that can put
// a token under a lock key, which run under a script's turn: the client's
// own script (GuardStated) and the repair of a drifted node (repair.lua).
// instance's TestAttackMarkClientScriptTakesAfterRenewal and
// TestAttackMarkRepairRestoreAfterRenewal show what a missing raise does.

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
		if v, _ := raw.Get(ctx, "lockproxy:released:a").Result(); v != "1002" {
			t.Errorf("a's mark after two scripts: %q, want 1002", v)
		}
		if p, _ := raw.PTTL(ctx, "lockproxy:released:a").Result(); p <= 0 || p > time.Minute {
			t.Errorf("a's mark TTL: %v, want the minute it had", p)
		}
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
	if v, _ := raw.Get(ctx, "lockproxy:released:a").Result(); v != "1001" {
		t.Errorf("a's mark after a RESTORE: %q, want 1001", v)
	}
	if p, _ := raw.PTTL(ctx, "lockproxy:released:a").Result(); p <= 0 || p > time.Minute {
		t.Errorf("a's mark TTL: %v, want the minute it had", p)
	}
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
