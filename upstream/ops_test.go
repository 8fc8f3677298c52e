package upstream

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// batchOn sends ops to n as one batch: the node is stopped while they
// queue behind a first call, which goes out alone, so that they go out
// together once it is answered. Their replies come back in the order of
// ops, without the run id.
func batchOn(t *testing.T, s *redistest.Server, n *RedisNode, ops []*quorum.Op) []quorum.Reply {
	t.Helper()
	if _, _, err := n.Inspect(testCtx(t), "warm"); err != nil { // a connection
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	done := make(quorum.Replies, len(ops)+1)
	n.Do(testCtx(t), &quorum.Op{Kind: quorum.OpInspect, Key: "first"}, -1, done)
	for i, op := range ops {
		n.Do(testCtx(t), op, i, done)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	out := make([]quorum.Reply, len(ops))
	for range len(ops) + 1 {
		r := <-done
		r.Incarnation = ""
		if r.Tag >= 0 {
			out[r.Tag] = r
		}
	}
	return out
}

// opsWithAnError are calls of each batchable kind, one of which (the leave)
// fails with WRONGTYPE, on a node where setUp ran.
func opsWithAnError(n *RedisNode) (setUp func(*testing.T, *redis.Client), ops []*quorum.Op) {
	line, _ := n.lineKeys("bad")
	setUp = func(t *testing.T, raw *redis.Client) {
		if err := raw.Set(t.Context(), line, "not a line", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h1, h2 := hold("t1", time.Minute), hold("t2", time.Minute)
	ops = []*quorum.Op{
		{Kind: quorum.OpAcquire, Key: "k1", Hold: h1, Attempt: "a1"},
		{Kind: quorum.OpLeave, Key: "bad", Token: "w"},
		{Kind: quorum.OpExtend, Key: "k1", Token: "t1", TTL: 2 * time.Minute, Attempt: "a1"},
		{Kind: quorum.OpAcquire, Key: "k2", Hold: h2, Attempt: "a2"},
		{Kind: quorum.OpCommit, Key: "k2", Token: "t2", Fence: 9, Attempt: "a2"},
		{Kind: quorum.OpInspect, Key: "k1"},
		{Kind: quorum.OpRelease, Key: "k2", Token: "t2", Attempt: "a2"},
		{Kind: quorum.OpInspect, Key: "k2"},
		{Kind: quorum.OpLeave, Key: "k1", Token: "nobody"},
		{Kind: quorum.OpFloor, Fence: 20, Token: "run"},
		{Kind: quorum.OpHeal, Key: "k3", Hold: hold("t3", time.Minute), Fence: 30, Attempt: "a3"},
	}
	return setUp, ops
}

// TestOpsErrorIsItsOwn: calls of lockproxy's own scripts that a batch has
// in a row run as one script call, and each gets the reply it gets when
// sent alone: a call failing (WRONGTYPE) fails alone, with the node's
// error, and the calls after it run. Without opsScript each call was a
// script call of its own (the count of EVALSHA fails); without its pcall,
// the error failed them all.
func TestOpsErrorIsItsOwn(t *testing.T) {
	batched, alone := redistest.Start(t, redistest.Options{}), redistest.Start(t, redistest.Options{})
	nb, na := newNode(t, RedisOptions{Addr: batched.Addr()}), newNode(t, RedisOptions{Addr: alone.Addr()})
	rb, ra := rawClient(t, batched.Addr()), rawClient(t, alone.Addr())
	setUp, ops := opsWithAnError(nb)
	setUp(t, rb)
	setUp(t, ra)
	if _, _, err := na.Inspect(testCtx(t), "warm"); err != nil { // as batchOn: the same calls on both nodes
		t.Fatal(err)
	}
	if err := rb.ScriptLoad(t.Context(), opsScript.src).Err(); err != nil {
		t.Fatal(err)
	}
	before := cmdCalls(t, rb, "evalsha")
	got := batchOn(t, batched, nb, ops)
	if calls := cmdCalls(t, rb, "evalsha") - before; calls != 3 { // batchOn's warm-up, its first call, the batch
		t.Errorf("%d script calls for a first call and a batch of %d, want 3", calls, len(ops))
	}
	for i, op := range ops {
		want := doOn(testCtx(t), na, op)
		want.Incarnation, want.Tag = "", i
		// The TTLs left differ by the time between the two calls.
		got[i].Entry.TTL, want.Entry.TTL = got[i].Entry.TTL.Round(time.Second), want.Entry.TTL.Round(time.Second)
		if i == 1 {
			var reply redis.Error
			if !errors.As(got[i].Err, &reply) || !redis.HasErrorPrefix(got[i].Err, "WRONGTYPE") || want.Err == nil ||
				!strings.HasPrefix(want.Err.Error(), got[i].Err.Error()) {
				t.Errorf("leave of a key that is no line: %v in a batch, %v alone", got[i].Err, want.Err)
			}
			continue
		}
		if fmt.Sprintf("%+v", got[i]) != fmt.Sprintf("%+v", want) {
			t.Errorf("%v in a batch: %+v, alone: %+v", op.Kind, got[i], want)
		}
	}
}

// TestOpsLuaErrorIsItsOwn: an error Lua raises in one call (not a
// command's) is that call's error reply, "ERR ..." as Redis says it, and
// the other calls of the batch run.
func TestOpsLuaErrorIsItsOwn(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	raw := rawClient(t, s.Addr())
	// opsScript with a script that raises where KEYS[1] is "boom".
	boom := &script{name: "boom", body: "if KEYS[1] == 'boom' then error('boom') end\nreturn KEYS[1]"}
	ops := newOps("", boom)
	head := []byte{boom.op, 1, 0, boom.op, 1, 0, boom.op, 1, 0}
	v, err := raw.Eval(t.Context(), ops.src, []string{"a", "boom", "c"}, head).Result()
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := v.([]any); ok { // go-redis reads a nested error as its own type, the node's reader as replyError
		for i, e := range a {
			if err, ok := e.(error); ok {
				a[i] = replyError(err.Error())
			}
		}
	}
	calls := make([]*call, 3)
	for i := range calls {
		calls[i] = &call{}
	}
	spread(calls, v, nil)
	if calls[0].val != "a" || calls[2].val != "c" || calls[0].reply != nil || calls[2].reply != nil {
		t.Errorf("the calls around the failing one: %+v, %+v", calls[0], calls[2])
	}
	if !strings.HasPrefix(fmt.Sprint(calls[1].reply), "ERR user_script:") || !strings.Contains(fmt.Sprint(calls[1].reply), "boom") || calls[1].val != nil {
		t.Errorf("the failing call: %+v", calls[1])
	}
}

// TestOpsBatchCutByDrop: a batch whose connection drops before the node
// answers it fails every call in it with the connection's error, not a
// reply of the node: their outcome is unknown.
func TestOpsBatchCutByDrop(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n, raw := newNode(t, RedisOptions{Addr: s.Addr()}), rawClient(t, s.Addr())
	mustAcquire(t, n, "warm", hold("w", time.Minute))
	if err := raw.ConfigSet(t.Context(), "lua-time-limit", "100").Err(); err != nil { // others get BUSY after 100ms of a script
		t.Fatal(err)
	}
	busy := admitted(t, `local t0 = redis.call('TIME')
repeat local t = redis.call('TIME') until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 3000000
return 1`)
	for _, src := range []string{string(busy.Src), opsScript.src} { // no NOSCRIPT: the batch runs as written
		if err := raw.ScriptLoad(t.Context(), src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	ctx := testCtx(t)
	done := make(quorum.Replies, 10)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: "first"}, -1, done) // goes out alone
	evalDone := make(chan quorum.Reply, 1)
	go func() { evalDone <- evalOn(ctx, n, busy, nil, nil) }() // the node is busy in it when the batch's calls are its next
	eventually(t, 5*time.Second, "the script queued", func() bool { return n.queued() == 1 })
	const calls = 6
	for i := range calls {
		n.Do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("k", i), Hold: hold("t", time.Minute)}, i, done)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the node busy in the script", func() bool {
		return redis.HasErrorPrefix(raw.Ping(t.Context()).Err(), "BUSY")
	})
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for range calls + 1 {
		r := <-done
		if r.Tag < 0 {
			continue
		}
		var reply redis.Error
		if r.Err == nil || errors.As(r.Err, &reply) {
			t.Errorf("call %d of a batch cut: %+v, want the connection's error", r.Tag, r)
		}
	}
	if r := <-evalDone; r.Err == nil {
		t.Errorf("the script whose connection dropped: %+v", r)
	}
}

// TestOpsNoScriptRecovers: once the node lost opsScript (SCRIPT FLUSH), a
// batch answered NOSCRIPT is sent again by source, as one EVAL, and every
// call of it gets its own reply.
func TestOpsNoScriptRecovers(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n, raw := newNode(t, RedisOptions{Addr: s.Addr()}), rawClient(t, s.Addr())
	acquires := func(round int) []*quorum.Op {
		var ops []*quorum.Op
		for i := range 5 {
			ops = append(ops, &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("k", round, i), Hold: hold("t", time.Minute)})
		}
		return ops
	}
	for round := range 3 {
		if err := raw.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		before := cmdCalls(t, raw, "eval")
		for i, r := range batchOn(t, s, n, acquires(round)) {
			if r.Err != nil || r.Claim.State != quorum.Acquired {
				t.Errorf("round %d call %d: %+v", round, i, r)
			}
		}
		// The warm-up's inspect (which loads it for the first call), the batch.
		if evals := cmdCalls(t, raw, "eval") - before; evals != 2 {
			t.Errorf("round %d: %d EVALs after SCRIPT FLUSH, want 2", round, evals)
		}
		if ok, err := raw.ScriptExists(t.Context(), opsScript.sha).Result(); err != nil || !ok[0] {
			t.Errorf("opsScript not cached again after the re-send: %v, %v", ok, err)
		}
	}
}
