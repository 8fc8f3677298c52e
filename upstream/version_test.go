package upstream

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

// The scripts of layout 1, as lockproxy ran them up to commit 3cbe2b7 (git
// show 3cbe2b7:upstream/scripts/acquire.lua): an instance of that version
// sharing the nodes with this one.
var (
	//go:embed testdata/layout1/acquire.lua
	layout1Acquire string
	//go:embed testdata/layout1/commit.lua
	layout1Commit string
	//go:embed testdata/layout1/floor.lua
	layout1Floor string
)

// layout1Acquire runs layout 1's acquire.lua as that version called it
// (a fresh acquire of key by token, nobody waiting).
func runLayout1Acquire(ctx context.Context, raw *redis.Client, key, token string) (any, error) {
	keys := []string{key, "lockproxy:fence:" + key, "lockproxy:line:" + key, "lockproxy:line-deadline:" + key,
		"lockproxy:undone:old", "lockproxy:fence-floor", "lockproxy:fence-max", "lockproxy:meta:" + key}
	return raw.Eval(ctx, layout1Acquire, keys, token, 60000, "lease", "old", "", 0, 0, "", 0, "old", "1").Result()
}

// TestLayout1RefusedOnLayout2: an instance of layout 1 meeting a node that
// this version has used gets an error from each script that could grant
// or raise a fence, and writes no lock: it can never grant a key with a
// fence below one granted here.
func TestLayout1RefusedOnLayout2(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		mustRelease(t, n, "k", "a", true)
		released := raw.Get(ctx, "lockproxy:meta:k").Val() // the released hold's meta stays for its TTL
		v, err := runLayout1Acquire(ctx, raw, "k", "old")
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("layout 1's acquire on a layout-2 node = %v, %v; want WRONGTYPE", v, err)
		}
		if got := raw.Exists(ctx, "k", "lockproxy:fence:k").Val(); got != 0 {
			t.Errorf("layout 1's acquire left %d of k and its counter", got)
		}
		if m := raw.Get(ctx, "lockproxy:meta:k").Val(); m != released {
			t.Errorf("layout 1's acquire wrote k's meta: %q, was %q", m, released)
		}
		err = raw.Eval(ctx, layout1Commit, []string{"k", "lockproxy:fence:k", "lockproxy:fence-max", "lockproxy:meta:k"}, "old", 1, "old").Err()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("layout 1's commit on a layout-2 node = %v; want WRONGTYPE", err)
		}
		err = raw.Eval(ctx, layout1Floor, []string{"lockproxy:fence-floor", "lockproxy:fence-max", "lockproxy:vetted"}, 1, "run").Err()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("layout 1's floor on a layout-2 node = %v; want WRONGTYPE", err)
		}
		// Layout 1's status read (restart.go's largest counter) fails too.
		if err := raw.Get(ctx, "lockproxy:fence-max").Err(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("GET fence-max on a layout-2 node = %v; want WRONGTYPE", err)
		}
		// This version still grants, above the fences it gave.
		if c, err := n.Acquire(ctx, "k", hold("b", time.Minute)); err != nil || c.State != quorum.Acquired || c.Fence != 2 {
			t.Errorf("Acquire after layout 1's attempts = %+v, %v; want fence 2", c, err)
		}
	})
}

// TestLayout1Migrates: a node that layout 1 used (per-key counters, a
// fence-floor and a fence-max, the largest written by Lua as 1.7e+15 is)
// takes layout 2 from the first script that needs its counter, whichever it
// is, and every fence granted after is above every fence of layout 1.
func TestLayout1Migrates(t *testing.T) {
	const top = 1795840067212561 // --new-nodes' floor: the time in µs
	for _, first := range []string{"acquire", "commit", "floor", "status"} {
		t.Run(first, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, addr string) {
				n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
				// A status read needs INFO server, which miniredis lacks.
				status := raw.Info(ctx, "server").Err() == nil
				how := first
				if how == "status" && !status {
					how = "acquire"
				}
				// Layout 1 at work: grants through its own scripts.
				raw.Set(ctx, "lockproxy:fence-floor", top-100, 0)
				for i, key := range []string{"a", "b", "a", "c"} {
					if _, err := runLayout1Acquire(ctx, raw, key, "old"+key); err != nil {
						t.Fatalf("layout 1's acquire %d of %s: %v", i, key, err)
					}
					raw.Del(ctx, key, "lockproxy:meta:"+key)
				}
				counters := map[string]int64{}
				largest := int64(0)
				for _, key := range []string{"a", "b", "c"} {
					f, err := raw.Get(ctx, "lockproxy:fence:"+key).Float64()
					if err != nil {
						t.Fatal(err)
					}
					counters[key] = int64(f)
					largest = max(largest, int64(f))
				}
				if largest != top-98 {
					t.Fatalf("layout 1's counters = %v, want the largest %d", counters, top-98)
				}
				switch how {
				case "commit": // a commit with a fence below layout 1's counters
					if _, err := n.Commit(ctx, "b", "x", 5); err != nil {
						t.Fatal(err)
					}
				case "floor":
					r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 7, Token: "run"})
					if r.Err != nil {
						t.Fatal(r.Err)
					}
				case "status": // reads layout 1's counter, migrates nothing
					r := n.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
					if r.Err != nil || r.Status.FenceMax != largest {
						t.Fatalf("status on a layout-1 node = %+v, %v; want FenceMax %d", r.Status, r.Err, largest)
					}
				}
				for _, key := range []string{"a", "b", "c", "d"} {
					c, err := n.Acquire(ctx, key, hold("new", time.Minute))
					if err != nil || c.State != quorum.Acquired || c.Fence <= largest {
						t.Errorf("Acquire(%s) after layout 1 = %+v, %v; want a fence above %d", key, c, err, largest)
					}
				}
				if typ := raw.Type(ctx, "lockproxy:fence-floor").Val(); typ != "hash" {
					t.Errorf("fence-floor is a %s after the migration, want a hash", typ)
				}
				if _, err := runLayout1Acquire(ctx, raw, "e", "old"); err == nil {
					t.Errorf("layout 1's acquire after the migration succeeded")
				}
				if !status {
					return
				}
				r := n.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
				if r.Err != nil || r.Status.FenceMax <= largest {
					t.Errorf("status after the migration = %+v, %v; want FenceMax above %d", r.Status, r.Err, largest)
				}
			})
		})
	}
}

// The scripts of layout 2, as lockproxy ran them up to commit c0fcb0f (git
// show c0fcb0f:upstream/scripts/acquire.lua): an instance of that version
// sharing the nodes with this one. Layout 3 changed no script's keys nor
// arguments, so command() builds layout 2's calls too.
var (
	//go:embed testdata/layout2/layout.lua
	layout2Layout string
	//go:embed testdata/layout2/acquire.lua
	layout2Acquire string
	//go:embed testdata/layout2/commit.lua
	layout2Commit string
	//go:embed testdata/layout2/extend.lua
	layout2Extend string
	//go:embed testdata/layout2/release.lua
	layout2Release string
	//go:embed testdata/layout2/inspect.lua
	layout2Inspect string
	//go:embed testdata/layout2/floor.lua
	layout2Floor string
	//go:embed testdata/layout2/heal.lua
	layout2Heal string
)

// runLayout2 runs op on the node behind raw as an instance of layout 2
// would: its script, with the keys and arguments of n's command.
func runLayout2(ctx context.Context, n *RedisNode, raw *redis.Client, op *quorum.Op) (any, error) {
	s, keys, args := n.command(op)
	src := map[string]string{
		"acquire": layout2Layout + layout2Acquire, "commit": layout2Layout + layout2Commit,
		"floor": layout2Layout + layout2Floor, "heal": layout2Layout + layout2Heal,
		"extend": layout2Extend, "release": layout2Release, "inspect": layout2Inspect,
	}[s.name]
	if src == "" {
		return nil, fmt.Errorf("no layout-2 script %s", s.name)
	}
	return raw.Eval(ctx, src, keys, args...).Result()
}

// layout2AcquireOp is an acquire op: fresh, and with the instance's next
// waiter to place when placing (which takes the script past its quiet
// path).
func layout2AcquireOp(key, token string, placing bool) *quorum.Op {
	h := hold(token, time.Minute)
	h.Fresh = true
	if placing {
		h.Next = &engine.Waiter{ID: token + "-next", Since: time.Now(), Keep: time.Minute}
	}
	return &quorum.Op{Kind: quorum.OpAcquire, Key: key, Hold: h, Attempt: "att-" + token}
}

// TestLayout2RefusedOnLayout3: an instance of layout 2 meeting a node that
// this version has used gets WRONGTYPE from each script that could grant
// or raise a fence, and from its status read, before it writes anything
// but one thing: its quiet acquire of a free key SETs the key before it
// counts (layout 2 counted after), and nothing can stop that. That key is
// a foreign holder's for its TTL to both versions: no meta, no fence, not
// granted to layout 2 (its script failed), refused to layout 3. No
// counter moves, and layout 2's settle never runs.
func TestLayout2RefusedOnLayout3(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		mustRelease(t, n, "k", "a", true)
		released := raw.Get(ctx, "lockproxy:meta:k").Val() // the released hold's meta stays for its TTL
		mustAcquire(t, n, "held", hold("a", time.Minute))
		counter := func() int64 {
			c, err := nodeCounter(ctx, raw)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		before := counter()
		wrongType := func(what string, v any, err error) {
			t.Helper()
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("layout 2's %s on a layout-3 node = %v, %v; want WRONGTYPE", what, v, err)
			}
		}
		// Past the quiet path (a waiter to place): nothing written, not
		// even a place in line.
		v, err := runLayout2(ctx, n, raw, layout2AcquireOp("w", "old", true))
		wrongType("placing acquire", v, err)
		if got := raw.Exists(ctx, "w", "lockproxy:meta:w", "lockproxy:line:w", "lockproxy:line-deadline:w").Val(); got != 0 {
			t.Errorf("layout 2's placing acquire left %d of w, its meta and its line", got)
		}
		// The quiet path on a free key: the key, and nothing else.
		v, err = runLayout2(ctx, n, raw, layout2AcquireOp("k", "old", false))
		wrongType("acquire", v, err)
		if m := raw.Get(ctx, "lockproxy:meta:k").Val(); m != released {
			t.Errorf("layout 2's acquire wrote a meta for k: %q, was %q", m, released)
		}
		if c, err := n.Acquire(ctx, "k", hold("b", time.Minute)); err != nil || c.State != quorum.Taken {
			t.Errorf("Acquire(k) over layout 2's key = %+v, %v; want taken", c, err)
		}
		if e := mustInspect(t, n, "k"); e.Token != "old" || e.Fence != 0 {
			t.Errorf("Inspect(k) = %+v; want old's key with no fence", e)
		}
		// The quiet path on a held key: nothing, not even a place in line
		// for a waiter (a layout-3 hold's release looks at the line only
		// where a layout-3 acquire placed a waiter: meta.lua's lined).
		v, err = runLayout2(ctx, n, raw, layout2AcquireOp("held", "old", false))
		wrongType("acquire of a held key", v, err)
		op := layout2AcquireOp("held", "old", false)
		op.Hold.Waiter = &engine.Waiter{ID: "old", Since: time.Now(), Keep: time.Minute}
		v, err = runLayout2(ctx, n, raw, op)
		wrongType("waiting acquire of a held key", v, err)
		if got := raw.Exists(ctx, "lockproxy:line:held", "lockproxy:line-deadline:held").Val(); got != 0 {
			t.Errorf("layout 2's waiting acquire took a place in line")
		}
		v, err = runLayout2(ctx, n, raw, &quorum.Op{Kind: quorum.OpCommit, Key: "held", Token: "a", Fence: before + 100})
		wrongType("commit", v, err)
		v, err = runLayout2(ctx, n, raw, &quorum.Op{Kind: quorum.OpFloor, Fence: before + 100, Token: "run"})
		wrongType("floor", v, err)
		if got := raw.Exists(ctx, "lockproxy:vetted").Val(); got != 0 {
			t.Errorf("layout 2's floor wrote the vetted run id")
		}
		now := time.Now().UnixMilli()
		v, err = runLayout2(ctx, n, raw, &quorum.Op{Kind: quorum.OpHeal, Key: "h", Hold: hold("old", time.Minute), Fence: before + 100,
			Attempt: "x", FreeAt: now, HealUntil: now + 60000})
		wrongType("heal", v, err)
		if got := raw.Exists(ctx, "h", "lockproxy:meta:h").Val(); got != 0 {
			t.Errorf("layout 2's heal left %d of h and its meta", got)
		}
		// Layout 2's status read (restart.go's largest counter) fails too.
		if err := raw.HGet(ctx, "lockproxy:layout", "fence").Err(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("HGET of the layout key on a layout-3 node = %v; want WRONGTYPE", err)
		}
		if c := counter(); c != before {
			t.Errorf("the node's counter went from %d to %d under layout 2's scripts", before, c)
		}
		for _, k := range []string{"lockproxy:fence-floor", "lockproxy:fence-max"} {
			if v := raw.HGet(ctx, k, "layout").Val(); v != "3" {
				t.Errorf("%s names layout %q, want 3 (layout 2's settle ran?)", k, v)
			}
		}
		// Layout 2's release and extend of a layout-3 hold fail, and leave it.
		v, err = runLayout2(ctx, n, raw, &quorum.Op{Kind: quorum.OpRelease, Key: "held", Token: "a"})
		wrongType("release", v, err)
		v, err = runLayout2(ctx, n, raw, &quorum.Op{Kind: quorum.OpExtend, Key: "held", Token: "a", TTL: time.Minute})
		wrongType("extend", v, err)
		if e := mustInspect(t, n, "held"); e.Token != "a" || e.Fence != before {
			t.Errorf("Inspect(held) = %+v; want a's hold with fence %d", e, before)
		}
		// This version still grants, above the fences it gave.
		if c, err := n.Acquire(ctx, "n", hold("b", time.Minute)); err != nil || c.State != quorum.Acquired || c.Fence != before+1 {
			t.Errorf("Acquire after layout 2's attempts = %+v, %v; want fence %d", c, err, before+1)
		}
	})
}

// TestLayout2Migrates: a node that layout 2 used (the counter in the
// layout hash, a meta hash beside a key still held) takes layout 3 from the
// first script that needs its counter, whichever it is; every fence
// granted after is above every fence of layout 2, the hold of layout 2
// stays held (a meta of another type is a meta lost: the hold's fence is
// unknown, never taken for another's), and layout 2 is refused from then
// on.
func TestLayout2Migrates(t *testing.T) {
	for _, first := range []string{"acquire", "placing acquire", "commit", "floor", "heal", "status"} {
		t.Run(first, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, addr string) {
				n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
				// A status read needs INFO server, which miniredis lacks.
				status := raw.Info(ctx, "server").Err() == nil
				how := first
				if how == "status" && !status {
					how = "acquire"
				}
				// Layout 2 at work: grants through its own scripts, from a
				// counter the restart rule raised high.
				if _, err := runLayout2(ctx, n, raw, &quorum.Op{Kind: quorum.OpFloor, Fence: 1795840067212561, Token: "run"}); err != nil {
					t.Fatal(err)
				}
				var largest int64
				for i, key := range []string{"a", "b", "a", "held"} {
					v, err := runLayout2(ctx, n, raw, layout2AcquireOp(key, "old"+key, false))
					r, ok := v.([]any)
					if err != nil || !ok || len(r) != 3 || r[0] != int64(1) {
						t.Fatalf("layout 2's acquire %d of %s = %v, %v", i, key, v, err)
					}
					largest = max(largest, r[2].(int64))
					if key != "held" {
						raw.Del(ctx, key, "lockproxy:meta:"+key)
					}
				}
				if typ := raw.Type(ctx, "lockproxy:meta:held").Val(); typ != "hash" {
					t.Fatalf("layout 2's meta is a %s, want a hash", typ)
				}
				switch how {
				case "acquire": // below, the quiet path
				case "placing acquire": // past the quiet path
					h := hold("w", time.Minute)
					h.Next = &engine.Waiter{ID: "w-next", Since: time.Now(), Keep: time.Minute}
					if c, err := n.Acquire(ctx, "w", h); err != nil || c.State != quorum.Acquired || c.Fence <= largest {
						t.Fatalf("placing Acquire(w) = %+v, %v; want a fence above %d", c, err, largest)
					}
				case "commit": // a commit with a fence below layout 2's counter
					if _, err := n.Commit(ctx, "b", "x", 5); err != nil {
						t.Fatal(err)
					}
				case "floor":
					if r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 7, Token: "run"}); r.Err != nil {
						t.Fatal(r.Err)
					}
				case "heal":
					now := time.Now().UnixMilli()
					r := n.do(ctx, &quorum.Op{Kind: quorum.OpHeal, Key: "h", Hold: hold("z", time.Minute), Fence: 5, Attempt: "x", FreeAt: now, HealUntil: now + 60000})
					if r.Err != nil || r.TTL <= 0 {
						t.Fatalf("heal = %+v; want h taken", r)
					}
				case "status": // reads layout 2's counter, migrates nothing
					r := n.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
					if r.Err != nil || r.Status.FenceMax != largest {
						t.Fatalf("status on a layout-2 node = %+v, %v; want FenceMax %d", r.Status, r.Err, largest)
					}
					if typ := raw.Type(ctx, "lockproxy:layout").Val(); typ != "hash" {
						t.Errorf("status changed the layout key to a %s", typ)
					}
				}
				for _, key := range []string{"a", "b", "c", "d"} {
					c, err := n.Acquire(ctx, key, hold("new", time.Minute))
					if err != nil || c.State != quorum.Acquired || c.Fence <= largest {
						t.Errorf("Acquire(%s) after layout 2 = %+v, %v; want a fence above %d", key, c, err, largest)
					}
				}
				if typ := raw.Type(ctx, "lockproxy:layout").Val(); typ != "string" {
					t.Errorf("the layout key is a %s after the migration, want a string", typ)
				}
				if v := raw.HGet(ctx, "lockproxy:fence-floor", "layout").Val(); v != "3" {
					t.Errorf("fence-floor names layout %q after the migration, want 3", v)
				}
				// Layout 2's hold is still held, its fence unknown; its
				// holder, through this version, renews and releases it.
				if c, err := n.Acquire(ctx, "held", hold("new", time.Minute)); err != nil || c.State != quorum.Taken {
					t.Errorf("Acquire(held) = %+v, %v; want taken", c, err)
				}
				if e := mustInspect(t, n, "held"); e.Token != "oldheld" || e.Fence != 0 {
					t.Errorf("Inspect(held) = %+v; want oldheld's with fence unknown", e)
				}
				if ttl, err := n.Extend(ctx, "held", "oldheld", time.Minute, ""); err != nil || ttl != time.Minute {
					t.Errorf("Extend(held) = %v, %v; want a minute", ttl, err)
				}
				if typ := raw.Type(ctx, "lockproxy:meta:held").Val(); typ != "string" {
					t.Errorf("the renewed hold's meta is a %s, want a string", typ)
				}
				mustRelease(t, n, "held", "oldheld", true)
				if v, err := runLayout2(ctx, n, raw, layout2AcquireOp("e", "old", true)); err == nil {
					t.Errorf("layout 2's acquire after the migration = %v", v)
				}
				if !status {
					return
				}
				r := n.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
				if r.Err != nil || r.Status.FenceMax <= largest {
					t.Errorf("status after the migration = %+v, %v; want FenceMax above %d", r.Status, r.Err, largest)
				}
			})
		})
	}
}
