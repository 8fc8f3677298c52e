package upstream

import (
	"context"
	_ "embed"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

// The scripts of layout 3 as lockproxy ran them before the meta outlived
// its key (git show 65a4181:upstream/scripts/extend.lua): an instance of
// that build sharing the nodes with this one. The change added arguments
// only at the end of each script's ARGV, so command() builds that build's
// calls too (its scripts ignore the arguments added); meta.lua, layout.lua
// and inspect.lua are unchanged.
var (
	//go:embed testdata/layout3-65a4181/acquire.lua
	before65Acquire string
	//go:embed testdata/layout3-65a4181/commit.lua
	before65Commit string
	//go:embed testdata/layout3-65a4181/extend.lua
	before65Extend string
	//go:embed testdata/layout3-65a4181/release.lua
	before65Release string
	//go:embed testdata/layout3-65a4181/heal.lua
	before65Heal string
)

// runBefore65 runs op on the node behind raw as an instance built from
// 65a4181 would: its script, with the keys and arguments of n's command.
func runBefore65(ctx context.Context, n *RedisNode, raw *redis.Client, op *quorum.Op) ([]int64, error) {
	s, keys, args := n.command(op)
	src := map[string]string{
		"acquire": layoutLua + metaLua + before65Acquire, "commit": layoutLua + metaLua + before65Commit,
		"extend": layoutLua + metaLua + before65Extend, "release": metaLua + before65Release,
		"heal": layoutLua + metaLua + before65Heal,
	}[s.name]
	if src == "" {
		return nil, fmt.Errorf("no 65a4181 script %s", s.name)
	}
	v, err := raw.Eval(ctx, src, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	var out []int64
	switch v := v.(type) {
	case int64:
		out = append(out, v)
	case []any:
		for _, e := range v {
			if i, ok := e.(int64); ok {
				out = append(out, i)
			} else {
				out = append(out, -99) // a string field (attempt, mode, name)
			}
		}
	}
	return out, nil
}

// TestMixedBefore65OverALingeringMeta: a meta that this build leaves past
// its key (a release deletes the key alone) gives an instance of the build
// before it (65a4181) no lower fence and no second grant. Its extension
// still answers "free" beside the meta (the hole stays open with such an
// instance, as the docs say), but its retry of the released token takes
// the key anew above the released fence, its commit of the released
// fence takes nothing, its heal decided from that "free" takes nothing
// once another grant took the key since, and its grant of another token
// is above every fence granted. Checked that it can fail: with the key
// SET to the released token by a client's script before the retry, the
// 65a4181 retry answers "already mine" with a fence not above the
// released one (the released hold's meta's while a release left it; the
// node's counter since a release leaves a blank meta).
func TestMixedBefore65OverALingeringMeta(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		const grace = 3 * time.Second
		// This build: a granted and released; its meta stays.
		ra := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute), Attempt: "xa", MetaFor: grace})
		if ra.Err != nil || ra.Claim.State != quorum.Acquired {
			t.Fatalf("acquire a: %+v", ra)
		}
		fa := ra.Claim.Fence
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", MetaFor: grace}); r.Err != nil || !r.OK {
			t.Fatalf("release a: %+v", r)
		}
		// 65a4181's renewal of a: "free" beside the meta (the hole as before).
		ext, err := runBefore65(ctx, n, raw, &quorum.Op{Kind: quorum.OpExtend, Key: "k", Token: "a", MarkFor: time.Minute})
		if err != nil || len(ext) != 2 || ext[0] != 0 {
			t.Fatalf("65a4181's extension of released a: %v %v, want free {0, at}", ext, err)
		}
		freeAt := ext[1]
		// 65a4181's commit of a's fence: the key is free, nothing written.
		if c, err := runBefore65(ctx, n, raw, &quorum.Op{Kind: quorum.OpCommit, Key: "k", Token: "a", Fence: fa}); err != nil || len(c) != 1 || c[0] != 0 {
			t.Errorf("65a4181's commit of released a: %v %v, want 0", c, err)
		}
		// 65a4181's retry of a (LOCK … TOKEN a): taken anew, above fa.
		retry, err := runBefore65(ctx, n, raw, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute), Attempt: "ya"})
		if err != nil || len(retry) != 3 || retry[0] != 1 || retry[2] <= fa {
			t.Fatalf("65a4181's retry of released a (fence %d): %v %v, want acquired above it", fa, retry, err)
		}
		fa2 := retry[2]
		if e, ok, err := n.Inspect(ctx, "k"); err != nil || !ok || e.Token != "a" || e.Fence != fa2 {
			t.Errorf("LOCKINFO after 65a4181's retry: %+v %v %v, want a with fence %d", e, ok, err, fa2)
		}
		// 65a4181's release deletes key and meta; this build grants b above.
		if r, err := runBefore65(ctx, n, raw, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a"}); err != nil || len(r) < 1 || r[0] != 1 {
			t.Fatalf("65a4181's release of a: %v %v", r, err)
		}
		rb := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("b", time.Minute), Attempt: "xb", MetaFor: grace})
		if rb.Err != nil || rb.Claim.State != quorum.Acquired || rb.Claim.Fence <= fa2 {
			t.Fatalf("acquire b after a's %d: %+v", fa2, rb)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "b", MetaFor: grace}); r.Err != nil || !r.OK {
			t.Fatalf("release b: %+v", r)
		}
		// 65a4181's heal of a, decided from its "free" answer above: a
		// grant took the key since (the mark is raised), nothing taken.
		h, err := runBefore65(ctx, n, raw, &quorum.Op{Kind: quorum.OpHeal, Key: "k", Hold: hold("a", time.Minute), Fence: fa,
			Attempt: "xa", FreeAt: freeAt, HealUntil: freeAt + time.Minute.Milliseconds()})
		if err != nil || len(h) != 1 || h[0] != 0 {
			t.Errorf("65a4181's heal of a with fence %d after b's grant: %v %v, want nothing taken", fa, h, err)
		}
		// 65a4181's fresh grant of c beside b's lingering meta: above b's.
		rc, err := runBefore65(ctx, n, raw, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: fresh(hold("c", time.Minute)), Attempt: "xc"})
		if err != nil || len(rc) != 3 || rc[0] != 1 || rc[2] <= rb.Claim.Fence {
			t.Errorf("65a4181's grant of c after b's %d: %v %v", rb.Claim.Fence, rc, err)
		}
		if e, ok, err := n.Inspect(ctx, "k"); err != nil || !ok || e.Token != "c" || len(rc) == 3 && e.Fence != rc[2] {
			t.Errorf("LOCKINFO after 65a4181's grant of c: %+v %v %v", e, ok, err)
		}
	})
}

// fresh is h as a fresh acquire's (SET NX: refused where the token holds
// the key).
func fresh(h engine.Hold) engine.Hold {
	h.Fresh = true
	return h
}
