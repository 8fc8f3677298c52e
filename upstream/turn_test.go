package upstream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/quorum"
)

func turnOp(ctx context.Context, n *RedisNode, kind quorum.OpKind, keys []string, token string) quorum.Reply {
	done := make(quorum.Replies, 1)
	n.Do(ctx, &quorum.Op{Kind: kind, Keys: keys, Token: token, TTL: time.Minute}, 0, done)
	return <-done
}

func guardedOn(ctx context.Context, n *RedisNode, s *luascript.Admitted, keys, args []string, token string) quorum.Reply {
	done := make(quorum.Replies, 1)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpEval, Script: s, Keys: keys, Args: args, Turn: token}, 0, done)
	return <-done
}

// TestTurnTakenAllOrNone: turn.lua takes every key's turn or none, again
// for the token that holds them; turnback.lua deletes only the token's.
func TestTurnTakenAllOrNone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n := newNode(t, RedisOptions{Addr: addr})
		raw := rawClient(t, addr)
		if r := turnOp(ctx, n, quorum.OpTurn, []string{"a", "b"}, "t1"); r.Err != nil || !r.OK {
			t.Fatalf("take a,b: %+v", r)
		}
		if r := turnOp(ctx, n, quorum.OpTurn, []string{"b", "c"}, "t2"); r.Err != nil || r.OK {
			t.Fatalf("take b,c while t1 holds b: %+v", r)
		}
		if v, err := raw.Exists(ctx, "lockproxy:turn:c").Result(); err != nil || v != 0 {
			t.Fatalf("c's turn taken by a refused attempt: %v %v", v, err)
		}
		if r := turnOp(ctx, n, quorum.OpTurn, []string{"a", "b"}, "t1"); r.Err != nil || !r.OK {
			t.Fatalf("take a,b again for t1: %+v", r)
		}
		if pttl, err := raw.PTTL(ctx, "lockproxy:turn:a").Result(); err != nil || pttl <= 0 || pttl > time.Minute {
			t.Fatalf("turn's TTL: %v %v", pttl, err)
		}
		if r := turnOp(ctx, n, quorum.OpTurnBack, []string{"a", "b"}, "t2"); r.Err != nil {
			t.Fatal(r.Err)
		}
		if v, _ := raw.Get(ctx, "lockproxy:turn:b").Result(); v != "t1" {
			t.Fatalf("another token gave back t1's turn: b holds %q", v)
		}
		if r := turnOp(ctx, n, quorum.OpTurnBack, []string{"a", "b"}, "t1"); r.Err != nil {
			t.Fatal(r.Err)
		}
		if v, _ := raw.Exists(ctx, "lockproxy:turn:a", "lockproxy:turn:b").Result(); v != 0 {
			t.Fatalf("%d turn keys left after the give-back", v)
		}
	})
}

// TestGuardRefusesWithoutTurn: a guarded script whose turn the node does
// not hold is not run there (no write) and is the node's failure
// (ErrTurnLost), not a reply; with the turn, it runs.
func TestGuardRefusesWithoutTurn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n := newNode(t, RedisOptions{Addr: addr})
		raw := rawClient(t, addr)
		incr := admitted(t, `return redis.call('INCR', KEYS[1])`)
		if r := guardedOn(ctx, n, incr, []string{"k"}, nil, "mine"); !errors.Is(r.Err, quorum.ErrTurnLost) {
			t.Fatalf("no turn: %+v", r)
		}
		turnOp(ctx, n, quorum.OpTurn, []string{"k"}, "other")
		if r := guardedOn(ctx, n, incr, []string{"k"}, nil, "mine"); !errors.Is(r.Err, quorum.ErrTurnLost) {
			t.Fatalf("another's turn: %+v", r)
		}
		if v, _ := raw.Exists(ctx, "k").Result(); v != 0 {
			t.Fatal("a refused script wrote")
		}
		turnOp(ctx, n, quorum.OpTurnBack, []string{"k"}, "other")
		turnOp(ctx, n, quorum.OpTurn, []string{"k"}, "mine")
		if r := guardedOn(ctx, n, incr, []string{"k", "k"}, nil, "mine"); r.Err != nil || r.Value.Int != 1 {
			t.Fatalf("with the turn: %+v", r)
		}
	})
}

// TestGuardRunsSourceUnchanged: with its turn, a guarded script replies
// exactly what the same source replies run plainly on the node (EVAL),
// errors included, for sources that test the wrapper: KEYS and ARGV as
// the client sent them, ... empty, a source ending in a comment without
// a newline, a top-level return in a block, nearly 200 locals, an error
// that names its line, a vararg use.
func TestGuardRunsSourceUnchanged(t *testing.T) {
	var many strings.Builder
	for i := range 190 {
		fmt.Fprintf(&many, "local v%d = %d\n", i, i)
	}
	many.WriteString("return v189 + #KEYS")
	sources := []string{
		`return {#KEYS, #ARGV, KEYS[1], KEYS[#KEYS], ARGV[1], ARGV[#ARGV], redis.call('SET', KEYS[1], ARGV[1])}`,
		`return select('#', ...)`,
		`return redis.call('GET', KEYS[1]) -- a comment, and no newline`,
		"if ARGV[1] == 'x' then\n  return 'early'\nend\nreturn 'late' --[[ long\ncomment ]]",
		many.String(),
		"local a = 1\nreturn redis.call('INCR', KEYS[2])",
		"local function f(...) return select('#', ...) end\nreturn f(unpack(ARGV))",
		`return nil`, `return false`, `return true`, `return 3.7`, `return {1, false, 'x'}`,
		`return redis.error_reply('MINE an error of its own')`, `return redis.status_reply('FINE')`,
	}
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n := newNode(t, RedisOptions{Addr: addr})
		raw := rawClient(t, addr)
		raw.Set(ctx, "str", "not a number", 0)
		isMiniredis := strings.HasSuffix(t.Name(), "miniredis")
		keys, args := []string{"k1", "str", "k1"}, []string{"x", "y", "z"}
		turnOp(ctx, n, quorum.OpTurn, []string{"k1", "str"}, "tok")
		for _, src := range sources {
			s := admitted(t, src)
			want, werr := raw.Eval(ctx, src, keys, "x", "y", "z").Result()
			wantR := evalReply(&quorum.Op{}, 0, want, werr, "")
			got := guardedOn(ctx, n, s, keys, args, "tok")
			if got.Err == nil && isMiniredis && got.Value.Kind == luascript.Error {
				// miniredis adds a Lua stack traceback to a script's
				// error, which names the guard's tail call: compare up to it.
				got.Value.Str, _, _ = strings.Cut(got.Value.Str, "stack traceback")
				wantR.Value.Str, _, _ = strings.Cut(wantR.Value.Str, "stack traceback")
			}
			if got.Err != nil || !reflect.DeepEqual(got.Value, wantR.Value) {
				t.Errorf("%q:\n guarded %+v\n plain   %+v", src, got, wantR)
			}
			// With its keys' states (quorum/repair.go): the same reply,
			// and the state of each unique key, k1 then str.
			done := make(quorum.Replies, 1)
			n.Do(ctx, &quorum.Op{Kind: quorum.OpEval, Script: s, Keys: keys, Args: args, Turn: "tok", State: true}, 0, done)
			st := <-done
			if st.Err == nil && isMiniredis && st.Value.Kind == luascript.Error {
				st.Value.Str, _, _ = strings.Cut(st.Value.Str, "stack traceback")
			}
			if st.Err != nil || !reflect.DeepEqual(st.Value, wantR.Value) {
				t.Errorf("%q with states:\n got   %+v\n plain %+v", src, st, wantR)
			}
			if wantR.Value.Kind != luascript.Error || st.States != nil {
				dump, _ := raw.Dump(ctx, "str").Result()
				if len(st.States) != 2 || !st.States[1].Known || st.States[1].Dump != dump || st.States[1].PTTL != -1 {
					t.Errorf("%q: states %+v, want k1's then str's (DUMP %q, no TTL)", src, st.States, dump)
				}
			}
		}
	})
}

// TestGuardKeepsShebang: a script that opens with a shebang line keeps
// it first; the body runs as Redis runs it plainly.
func TestGuardKeepsShebang(t *testing.T) {
	src := "#!lua\nreturn redis.call('INCR', KEYS[1])"
	g := Guard(src)
	if !strings.HasPrefix(g, "#!lua\nlocal __lp_tok") || !strings.HasSuffix(g, src[len("#!lua\n"):]+"\nend return __lp_body()") {
		t.Fatalf("guarded:\n%s", g)
	}
	if strings.Count(Guard("return 1"), "\n") != 1 {
		t.Fatalf("the guard must not shift the body's lines: %q", Guard("return 1"))
	}
}

// TestGuardRefusesLateScript: a script whose turn expired before it
// reached the node (its instance paused between taking the turn and
// sending the script) is refused there, after another token took the turn
// and ran its own script, and while nobody holds the turn: it never runs
// after the script that came in the next turn.
func TestGuardRefusesLateScript(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n := newNode(t, RedisOptions{Addr: addr})
		raw := rawClient(t, addr)
		appendS := admitted(t, `return redis.call('APPEND', KEYS[1], ARGV[1])`)
		done := make(quorum.Replies, 1)
		n.Do(ctx, &quorum.Op{Kind: quorum.OpTurn, Keys: []string{"k"}, Token: "late", TTL: 50 * time.Millisecond}, 0, done)
		if r := <-done; r.Err != nil || !r.OK {
			t.Fatalf("take: %+v", r)
		}
		eventually(t, 10*time.Second, "the late turn expires", func() bool { return raw.Exists(ctx, "lockproxy:turn:k").Val() == 0 })
		if r := guardedOn(ctx, n, appendS, []string{"k"}, []string{"late"}, "late"); !errors.Is(r.Err, quorum.ErrTurnLost) {
			t.Fatalf("late script, nobody's turn: %+v", r)
		}
		turnOp(ctx, n, quorum.OpTurn, []string{"k"}, "next")
		if r := guardedOn(ctx, n, appendS, []string{"k"}, []string{"next"}, "next"); r.Err != nil || r.Value.Int != 4 {
			t.Fatalf("next turn's script: %+v", r)
		}
		if r := guardedOn(ctx, n, appendS, []string{"k"}, []string{"late"}, "late"); !errors.Is(r.Err, quorum.ErrTurnLost) {
			t.Fatalf("late script, another's turn: %+v", r)
		}
		turnOp(ctx, n, quorum.OpTurnBack, []string{"k"}, "next")
		if r := guardedOn(ctx, n, appendS, []string{"k"}, []string{"late"}, "late"); !errors.Is(r.Err, quorum.ErrTurnLost) {
			t.Fatalf("late script after the next turn: %+v", r)
		}
		if v := raw.Get(ctx, "k").Val(); v != "next" {
			t.Fatalf("k holds %q, want only the next turn's write", v)
		}
	})
}

// TestGuardedScriptGoesWithItsScript: the guarded form of a script is made
// once and kept with the admitted script, not in a table of every script
// ever guarded: once the script cache drops an admitted script, nothing
// keeps it (clients that inline values in scripts send endless distinct
// ones).
func TestGuardedScriptGoesWithItsScript(t *testing.T) {
	collected := make(chan struct{})
	func() {
		s := admitted(t, `return redis.call('SET', KEYS[1], ARGV[1])`)
		if g := guardedScript(s, false); g != guardedScript(s, false) {
			t.Fatal("the guarded script was made twice")
		}
		runtime.AddCleanup(s, func(ch chan struct{}) { close(ch) }, collected)
	}()
	for deadline := time.Now().Add(20 * time.Second); ; {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("an admitted script that was guarded is never collected: something keeps it")
		}
	}
}

// TestRepairGuardedByTurn: an OpRepair gives keys the states it carries
// (RESTORE with the remaining time, no TTL for -1, DEL for -2) only while
// the node's turn on them is the repair's; otherwise nothing changes and
// the node's failure is ErrTurnLost.
func TestRepairGuardedByTurn(t *testing.T) {
	ctx := testCtx(t)
	addr := redistest.Start(t, redistest.Options{}).Addr()
	n := newNode(t, RedisOptions{Addr: addr})
	raw := rawClient(t, addr)
	raw.HSet(ctx, "src", "f", "v")
	dump, err := raw.Dump(ctx, "src").Result()
	if err != nil {
		t.Fatal(err)
	}
	raw.Set(ctx, "a", "old", 0)
	raw.Set(ctx, "gone", "x", 0)
	fix := []quorum.KeyState{{Known: true, Dump: dump, PTTL: 60000}, {Known: true, Dump: dump, PTTL: -1}, {Known: true, PTTL: -2}}
	keys := []string{"a", "b", "gone"}
	repair := func(token string) quorum.Reply {
		done := make(quorum.Replies, 1)
		n.Do(ctx, &quorum.Op{Kind: quorum.OpRepair, Keys: keys, Fix: fix, Turn: token}, 0, done)
		return <-done
	}
	turnOp(ctx, n, quorum.OpTurn, keys, "other")
	if r := repair("mine"); !errors.Is(r.Err, quorum.ErrTurnLost) {
		t.Fatalf("another's turn: %+v", r)
	}
	if v, _ := raw.Get(ctx, "a").Result(); v != "old" {
		t.Fatalf("a repair without its turn changed a: %q", v)
	}
	turnOp(ctx, n, quorum.OpTurnBack, keys, "other")
	turnOp(ctx, n, quorum.OpTurn, keys, "mine")
	if r := repair("mine"); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, k := range []string{"a", "b"} {
		if v, err := raw.HGet(ctx, k, "f").Result(); err != nil || v != "v" {
			t.Fatalf("%s after the repair: %q %v", k, v, err)
		}
	}
	if p, _ := raw.PTTL(ctx, "a").Result(); p <= 0 || p > time.Minute {
		t.Fatalf("a's TTL: %v", p)
	}
	if p, _ := raw.PTTL(ctx, "b").Result(); p != -1 {
		t.Fatalf("b's TTL: %v, want none", p)
	}
	if v, _ := raw.Exists(ctx, "gone").Result(); v != 0 {
		t.Fatal("a key the majority does not hold was not deleted")
	}
}
