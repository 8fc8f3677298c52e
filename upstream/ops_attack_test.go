package upstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestAttackOpsOrderAroundClientScripts: a batch mixing lockproxy's own
// calls with clients' scripts runs them in the order queued: a client's
// script between an acquire and the release of the same key sees the key
// held, one after the release sees it free; an acquire and its own
// rollback, and a heal and a release of the same key, each in one group,
// leave the key as they would alone.
func TestAttackOpsOrderAroundClientScripts(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n, raw := newNode(t, RedisOptions{Addr: s.Addr()}), rawClient(t, s.Addr())
	get := admitted(t, "return redis.call('GET', KEYS[1])")
	lock := n.lockKey("k1")
	ops := []*quorum.Op{
		{Kind: quorum.OpAcquire, Key: "k1", Hold: hold("t1", time.Minute), Attempt: "a1"},
		{Kind: quorum.OpEval, Script: get, Keys: []string{lock}},
		{Kind: quorum.OpRelease, Key: "k1", Token: "t1", Attempt: "a1"},
		{Kind: quorum.OpEval, Script: get, Keys: []string{lock}},
		{Kind: quorum.OpAcquire, Key: "k2", Hold: hold("t2", time.Minute), Attempt: "a2"},
		{Kind: quorum.OpRelease, Key: "k2", Token: "t2", Attempt: "a2", Rollback: true, Undo: "a2"},
		{Kind: quorum.OpInspect, Key: "k2"},
		{Kind: quorum.OpHeal, Key: "k3", Hold: hold("t3", time.Minute), Fence: 30, Attempt: "a3",
			FreeAt: time.Now().UnixMilli(), HealUntil: time.Now().Add(time.Minute).UnixMilli()},
		{Kind: quorum.OpRelease, Key: "k3", Token: "t3", Attempt: "a3"},
		{Kind: quorum.OpInspect, Key: "k3"},
	}
	loadAll(t, raw, string(get.Src)) // no NOSCRIPT re-send moves a call after the others
	got := batchOn(t, s, n, ops)
	for i, r := range got {
		if r.Err != nil {
			t.Fatalf("call %d (%v): %v", i, ops[i].Kind, r.Err)
		}
	}
	if c := got[0].Claim; c.State != quorum.Acquired {
		t.Errorf("acquire k1: %+v", c)
	}
	if v := got[1].Value; v.Str != "t1" {
		t.Errorf("client script after the acquire read %+v, want the token t1", v)
	}
	if !got[2].OK {
		t.Errorf("release k1: %+v", got[2])
	}
	if v := got[3].Value; v.Str != "" {
		t.Errorf("client script after the release read %+v, want no value", v)
	}
	if got[4].Claim.State != quorum.Acquired || !got[5].OK || got[6].OK {
		t.Errorf("acquire, rollback, inspect of k2 in one group: %+v / %+v / %+v", got[4].Claim, got[5], got[6])
	}
	if got[7].TTL <= 0 || !got[8].OK || got[9].OK {
		t.Errorf("heal, release, inspect of k3 in one group: %+v / %+v / %+v", got[7], got[8], got[9])
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if ex, err := raw.Exists(t.Context(), n.lockKey(k)).Result(); err != nil || ex != 0 {
			t.Errorf("%s after the batch: exists %d, %v", k, ex, err)
		}
	}
}

// TestAttackOpsOwnDeadlineInAGroup: two acquires in one group, written
// while the node is stopped and answered after the first one's deadline,
// within the second's: the first fails with its deadline (its outcome
// unknown), the second gets its reply. A group's reply is read once; each
// call's deadline still counts.
func TestAttackOpsOwnDeadlineInAGroup(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n, raw := newNode(t, RedisOptions{Addr: s.Addr()}), rawClient(t, s.Addr())
	loadAll(t, raw)
	if _, _, err := n.Inspect(testCtx(t), "warm"); err != nil { // an idle connection
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	short, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	done := make(quorum.Replies, 2)
	// Queued together, as callers' calls meet in the queue: one batch, one group.
	n.mu.Lock()
	sent := n.Stats().RoundTrips
	for i, ctx := range []context.Context{short, testCtx(t)} {
		op := &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("d", i), Hold: hold(fmt.Sprint("t", i), time.Minute)}
		n.queue = append(n.queue, &call{ctx: ctx, op: op, tag: i, done: done})
	}
	n.dispatch(nil)
	if rt := n.Stats().RoundTrips - sent; rt != 1 {
		t.Fatalf("%d batches for the two calls, want 1", rt)
	}
	<-short.Done()
	time.Sleep(100 * time.Millisecond)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	got := make([]quorum.Reply, 2)
	for range 2 {
		r := <-done
		got[r.Tag] = r
	}
	if !errors.Is(got[0].Err, context.DeadlineExceeded) {
		t.Errorf("acquire answered after its own deadline: %+v, want its deadline's error", got[0])
	}
	if got[1].Err != nil || got[1].Claim.State != quorum.Acquired {
		t.Errorf("acquire answered within its deadline: %+v", got[1])
	}
	for i := range 2 { // both ran, in one script call
		if ex, err := raw.Exists(t.Context(), n.lockKey(fmt.Sprint("d", i))).Result(); err != nil || ex != 1 {
			t.Fatalf("acquire %d did not run (%d, %v): the test did not test", i, ex, err)
		}
	}
}

// TestAttackOpsLargeGroup: a batch of thousands of calls (max_batch goes
// to 100,000) runs as one group, more keys and arguments than Lua 5.1's C
// stack holds (LUAI_MAXCSTACK 8000): each call gets its own reply.
func TestAttackOpsLargeGroup(t *testing.T) {
	const calls = 1500 // 12,000 keys, 16,501 arguments
	s := redistest.Start(t, redistest.Options{})
	n, raw := newNode(t, RedisOptions{Addr: s.Addr(), MaxBatch: 2 * calls}), rawClient(t, s.Addr())
	if err := raw.ScriptLoad(t.Context(), opsScript.src).Err(); err != nil {
		t.Fatal(err)
	}
	ops := make([]*quorum.Op, calls)
	for i := range ops {
		ops[i] = &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("big", i), Hold: hold(fmt.Sprint("t", i), time.Minute), Attempt: fmt.Sprint("a", i)}
	}
	before := cmdCalls(t, raw, "evalsha")
	for i, r := range batchOn(t, s, n, ops) {
		if r.Err != nil || r.Claim.State != quorum.Acquired {
			t.Fatalf("call %d of %d in one group: %+v", i, calls, r)
		}
		if v, err := raw.Get(t.Context(), n.lockKey(ops[i].Key)).Result(); err != nil || v != ops[i].Hold.Token {
			t.Fatalf("key %s after the group: %q, %v", ops[i].Key, v, err)
		}
	}
	if sent := cmdCalls(t, raw, "evalsha") - before; sent != 3 { // batchOn's warm-up and first call, the group
		t.Errorf("%d script calls, want 3", sent)
	}
	// As the write buffer, the group's scratch is not kept after a big
	// batch: a batch of max_batch (up to 100,000) acquires would hold tens
	// of MB per connection for good.
	n.mu.Lock()
	cn := n.conn
	n.mu.Unlock()
	if cn == nil {
		t.Fatal("no connection")
	}
	if k, a := cap(cn.keys), cap(cn.args); k > maxScratch || a > maxScratch {
		t.Errorf("the group's scratch kept: %d keys, %d arguments", k, a)
	}
}

// TestAttackOpsNoScriptAroundClientScript: a batch [group, client script,
// group] on a node that lost lockproxy's scripts but has the client's:
// both groups are answered NOSCRIPT (nothing of them ran), the client's
// script ran once, and the re-send runs each own call once.
func TestAttackOpsNoScriptAroundClientScript(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n, raw := newNode(t, RedisOptions{Addr: s.Addr()}), rawClient(t, s.Addr())
	incr := admitted(t, "return redis.call('INCR', KEYS[1])")
	var ops []*quorum.Op
	for i := range 5 {
		if i == 2 {
			ops = append(ops, &quorum.Op{Kind: quorum.OpEval, Script: incr, Keys: []string{"ran"}})
			continue
		}
		ops = append(ops, &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("n", i), Hold: hold(fmt.Sprint("t", i), time.Minute), Attempt: fmt.Sprint("a", i)})
	}
	if _, _, err := n.Inspect(testCtx(t), "warm"); err != nil {
		t.Fatal(err)
	}
	if err := raw.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	// batchOn's own inspects load inspect.lua by source; the client's script is cached.
	if err := raw.ScriptLoad(t.Context(), string(incr.Src)).Err(); err != nil {
		t.Fatal(err)
	}
	before := cmdCalls(t, raw, "eval")
	got := batchOn(t, s, n, ops)
	for i, r := range got {
		if i == 2 {
			if r.Err != nil || r.Value.Int != 1 {
				t.Errorf("the client's script: %+v, want its INCR to 1", r)
			}
			continue
		}
		if r.Err != nil || r.Claim.State != quorum.Acquired {
			t.Errorf("call %d: %+v, want acquired once", i, r)
		}
	}
	if v, err := raw.Get(t.Context(), "ran").Result(); err != nil || v != "1" {
		t.Errorf("the client's script ran %q times (%v)", v, err)
	}
	// batchOn's warm-up inspect and first inspect (each alone, inspect.lua
	// by source once), then the four acquires as one group by source.
	if evals := cmdCalls(t, raw, "eval") - before; evals > 3 {
		t.Errorf("%d EVALs, want at most 3", evals)
	}
}

// TestAttackOpsEmbedded: embedded mode's nodes (miniredis, gopher-lua) run
// opsScript as redis-server does: calls queued behind a first one go out
// as groups, each call gets its own reply, and a command's error in one
// (WRONGTYPE) is its own, the others run.
func TestAttackOpsEmbedded(t *testing.T) {
	e, err := StartEmbedded(1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	addr := e.Addrs()[0]
	n, raw := newNode(t, RedisOptions{Addr: addr}), rawClient(t, addr)
	line, _ := n.lineKeys("bad")
	if err := raw.Set(t.Context(), line, "not a line", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const calls = 200
	done := make(quorum.Replies, calls)
	before := n.Stats()
	for i := range calls {
		op := &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("e", i), Hold: hold(fmt.Sprint("t", i), time.Minute), Attempt: fmt.Sprint("a", i)}
		switch i % 10 {
		case 5:
			op = &quorum.Op{Kind: quorum.OpLeave, Key: "bad", Token: "w"}
		case 7: // no arguments: a 0 in the group's head
			op = &quorum.Op{Kind: quorum.OpInspect, Key: "free"}
		}
		n.Do(testCtx(t), op, i, done)
	}
	for range calls {
		r := <-done
		if r.Tag%10 == 5 {
			var reply redis.Error
			if !errors.As(r.Err, &reply) {
				t.Errorf("leave of a key that is no line: %+v, want the node's error", r)
			}
			continue
		}
		if r.Tag%10 == 7 {
			if r.Err != nil || r.OK {
				t.Errorf("inspect of a free key: %+v", r)
			}
			continue
		}
		if r.Err != nil || r.Claim.State != quorum.Acquired {
			t.Errorf("acquire %d: %+v", r.Tag, r)
			continue
		}
		if v, err := raw.Get(t.Context(), n.lockKey(fmt.Sprint("e", r.Tag))).Result(); err != nil || v != fmt.Sprint("t", r.Tag) {
			t.Errorf("key e%d: %q, %v", r.Tag, v, err)
		}
	}
	if rt := n.Stats().RoundTrips - before.RoundTrips; rt >= calls/2 {
		t.Fatalf("%d round trips for %d calls: too few groups to test", rt, calls)
	}
}

// loadAll caches lockproxy's scripts and srcs on the node.
func loadAll(t *testing.T, raw *redis.Client, srcs ...string) {
	t.Helper()
	for _, sc := range scripts {
		srcs = append(srcs, sc.src)
	}
	for _, src := range srcs {
		if err := raw.ScriptLoad(t.Context(), src).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAttackOpsOOMReplyIsTruthful: a node over maxmemory (noeviction)
// refuses a script's first write that needs memory, and Redis checks that
// once per script call: alone, each acquire after a release is refused
// OOM; in one group, the release's DEL is the group's first write, and
// the acquires after it are granted past maxmemory (docs/pending-attackb.md).
// Whichever way, each call's reply says what it did on the node: a grant
// is held there, an OOM wrote nothing, and no reply is another call's.
func TestAttackOpsOOMReplyIsTruthful(t *testing.T) {
	for _, grouped := range []bool{false, true} {
		s := redistest.Start(t, redistest.Options{})
		n, raw := newNode(t, RedisOptions{Addr: s.Addr()}), rawClient(t, s.Addr())
		loadAll(t, raw)
		mustAcquire(t, n, "k0", hold("t0", time.Minute))
		if err := raw.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		ops := []*quorum.Op{
			{Kind: quorum.OpRelease, Key: "k0", Token: "t0"},
			{Kind: quorum.OpAcquire, Key: "k1", Hold: hold("t1", time.Minute), Attempt: "a1"},
			{Kind: quorum.OpAcquire, Key: "k2", Hold: hold("t2", time.Minute), Attempt: "a2"},
		}
		var got []quorum.Reply
		if grouped {
			got = batchOn(t, s, n, ops)
		} else {
			for _, op := range ops {
				got = append(got, doOn(testCtx(t), n, op))
			}
		}
		oom := 0
		for i, r := range got {
			held, err := raw.Get(t.Context(), n.lockKey(ops[i].Key)).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			switch {
			case r.Err != nil && redis.HasErrorPrefix(r.Err, "OOM") && held == "":
				oom++
			case r.Err != nil:
				t.Errorf("grouped %v, %v %s: %v (node: %q)", grouped, ops[i].Kind, ops[i].Key, r.Err, held)
			case ops[i].Kind == quorum.OpRelease && (!r.OK || held != ""):
				t.Errorf("grouped %v, release: %+v, the node holds %q", grouped, r, held)
			case ops[i].Kind == quorum.OpAcquire && (r.Claim.State != quorum.Acquired || held != ops[i].Hold.Token):
				t.Errorf("grouped %v, acquire %s: %+v, the node holds %q", grouped, ops[i].Key, r.Claim, held)
			}
		}
		if !grouped && oom != 2 {
			t.Fatalf("alone, %d acquires refused OOM, want 2: the node was not over maxmemory", oom)
		}
		t.Logf("grouped %v: %d of 2 acquires refused OOM", grouped, oom)
	}
}
