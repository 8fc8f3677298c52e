package upstream

import (
	"context"
	_ "embed"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
		v, err := runLayout1Acquire(ctx, raw, "k", "old")
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("layout 1's acquire on a layout-2 node = %v, %v; want WRONGTYPE", v, err)
		}
		if got := raw.Exists(ctx, "k", "lockproxy:meta:k", "lockproxy:fence:k").Val(); got != 0 {
			t.Errorf("layout 1's acquire left %d of k, its meta hash and its counter", got)
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
