package upstream

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on layout 3 (one meta string, the node's counter a string,
// counted before the take and taken back, and a release that skips the
// line where the meta says nobody took a place): each test drives one
// interleaving of scripts step by step against a node.

// wakes expects the next release notification to be payload.
func wakes(t *testing.T, ps *redis.PubSub, payload string) {
	t.Helper()
	m, err := ps.ReceiveMessage(testCtx(t))
	if err != nil || m.Payload != payload {
		t.Fatalf("release notification %v, %v; want %q", m, err, payload)
	}
}

// mustWait places w in key's line: the key is held, so the acquire is refused.
func mustWait(t *testing.T, n *RedisNode, key string, w engine.Hold) {
	t.Helper()
	if c, err := n.Acquire(testCtx(t), key, w); err != nil || c.State != quorum.Taken {
		t.Fatalf("waiting Acquire(%s, %s) = %+v, %v; want taken (a place in line)", key, w.Token, c, err)
	}
}

// TestAttackLineFlagSurvivesRewrites: a waiter placed while a quiet hold
// (lined '0') is held, before or after any script rewrites the hold's meta
// (a refresh by a retry, an extension with or without a mode or a ttl, a
// commit of a higher or a lower fence, a heal after the node lost the key),
// and with the meta intact, lost, or left a layout-2 hash, is woken by the
// hold's release: no rewrite turns the flag back to '0'.
func TestAttackLineFlagSurvivesRewrites(t *testing.T) {
	rewrites := []string{"refresh", "extend", "extend-mode", "extend-own-ttl", "commit", "commit-lower", "commit-attempt", "heal"}
	forEachBackend(t, func(t *testing.T, addr string) {
		n, raw := newNode(t, RedisOptions{Addr: addr}), rawClient(t, addr)
		ctx := testCtx(t)
		ps := rawSubscribe(t, raw, defaultChannel)
		i := 0
		for _, rewrite := range rewrites {
			for _, meta := range []string{"intact", "lost", "hash"} {
				for _, order := range []string{"waiter-first", "rewrite-first"} {
					if rewrite == "heal" && meta != "intact" {
						continue // a heal writes the meta anew whatever was there
					}
					i++
					key := fmt.Sprintf("k%d", i)
					what := rewrite + "/" + meta + "/" + order
					h := hold("a", time.Minute)
					c, err := n.Acquire(ctx, key, h)
					if err != nil || c.State != quorum.Acquired {
						t.Fatalf("%s: %+v %v", what, c, err)
					}
					if m, err := readMeta(ctx, raw, key); err != nil || m["lined"] != "0" {
						t.Fatalf("%s: a quiet grant's meta %v, %v; want lined 0", what, m, err)
					}
					switch meta {
					case "lost":
						raw.Del(ctx, DefaultPrefix+"meta:"+key)
					case "hash":
						raw.Del(ctx, DefaultPrefix+"meta:"+key)
						raw.HSet(ctx, DefaultPrefix+"meta:"+key, "token", "a", "fence", c.Fence, "attempt", "", "took", "1")
						raw.PExpire(ctx, DefaultPrefix+"meta:"+key, time.Minute)
					}
					w := waiting("w"+key, "w"+key, time.Now())
					if order == "waiter-first" {
						mustWait(t, n, key, w)
					}
					switch rewrite {
					case "refresh": // a retry of LOCK ... TOKEN, through any instance
						if c, err := n.Acquire(ctx, key, h); err != nil || c.State != quorum.Mine {
							t.Fatalf("%s: refresh %+v %v", what, c, err)
						}
					case "extend", "extend-mode", "extend-own-ttl":
						ttl, mode := time.Minute, engine.Mode("")
						if rewrite == "extend-mode" {
							mode = engine.Lease
						}
						if rewrite == "extend-own-ttl" {
							ttl = 0
						}
						if got, err := n.Extend(ctx, key, "a", ttl, mode); err != nil || got <= 0 {
							t.Fatalf("%s: extend %v %v", what, got, err)
						}
					case "commit", "commit-lower", "commit-attempt":
						op := &quorum.Op{Kind: quorum.OpCommit, Key: key, Token: "a", Fence: c.Fence + 7}
						if rewrite == "commit-lower" {
							op.Fence = 1
						}
						if rewrite == "commit-attempt" {
							op.Attempt, op.Fence = "some-attempt", 1
						}
						if r := n.do(ctx, op); r.Err != nil || !r.OK {
							t.Fatalf("%s: commit %+v", what, r)
						}
					case "heal": // the node lost the key (and its meta), the line stayed
						raw.Del(ctx, key, DefaultPrefix+"meta:"+key)
						now := time.Now().UnixMilli()
						r := n.do(ctx, &quorum.Op{Kind: quorum.OpHeal, Key: key, Hold: h, Fence: c.Fence, Attempt: "x", FreeAt: now, HealUntil: now + 60000})
						if r.Err != nil || r.TTL <= 0 {
							t.Fatalf("%s: heal %+v", what, r)
						}
					}
					if order == "rewrite-first" {
						mustWait(t, n, key, w)
					}
					if m, err := readMeta(ctx, raw, key); err == nil && m["lined"] == "0" {
						t.Errorf("%s: the meta says nobody waits (%v), and %s does", what, m, w.Token)
					}
					mustRelease(t, n, key, "a", true)
					wakes(t, ps, "1:a"+key)
					if ok, err := n.leave(ctx, key, w.Token); err != nil || !ok {
						t.Fatalf("%s: leave %v %v", what, ok, err)
					}
					wakes(t, ps, fmt.Sprintf("%d:%s%s", len(w.Token), w.Token, key))
				}
			}
		}
	})
}

// TestAttackLineNextWaiterPlacedAtGrant: a grant that places its
// instance's next waiter (ARGV[8]) on a node where nobody waited flags
// its own meta: a release through another instance (which does not wake
// that waiter itself) publishes, and a release through the placing
// instance leaves the waiter's place for that instance to wake. A later
// refresh of the hold keeps the flag.
func TestAttackLineNextWaiterPlacedAtGrant(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, raw := newNode(t, RedisOptions{Addr: addr}), rawClient(t, addr)
		ctx := testCtx(t)
		ps := rawSubscribe(t, raw, defaultChannel)
		for _, through := range []string{"other", "own"} {
			key := "k-" + through
			first := hold("first", time.Minute)
			first.Next = &engine.Waiter{ID: "second", Since: time.Now(), Keep: time.Minute}
			if c, err := n.Acquire(ctx, key, first); err != nil || c.State != quorum.Acquired {
				t.Fatal(c, err)
			}
			// A retry of first's LOCK (a refresh) with no next waiter.
			if c, err := n.Acquire(ctx, key, hold("first", time.Minute)); err != nil || c.State != quorum.Mine {
				t.Fatal(c, err)
			}
			if m, err := readMeta(ctx, raw, key); err != nil || m["lined"] != "1" {
				t.Fatalf("the placing grant's meta %v, %v; want lined 1", m, err)
			}
			op := &quorum.Op{Kind: quorum.OpRelease, Key: key, Token: "first"}
			if through == "own" {
				op.Line = []engine.Waiter{{ID: "first"}, {ID: "second"}}
			}
			if r := n.do(ctx, op); r.Err != nil || !r.OK {
				t.Fatalf("release %+v", r)
			}
			if through == "other" {
				wakes(t, ps, "5:first"+key)
			}
			if s, err := raw.ZScore(ctx, DefaultPrefix+"line:"+key, "second").Result(); err != nil || s == 0 {
				t.Fatalf("second's place after first's release: %v, %v", s, err)
			}
			if ok, err := n.leave(ctx, key, "second"); err != nil || !ok {
				t.Fatal(ok, err)
			}
			// Through its own instance nothing was published for first's
			// release: the next message is second's leave.
			wakes(t, ps, "6:second"+key)
		}
	})
}

// TestAttackLineTokenThatWaits: a token that waits (a LOCK ... TOKEN
// retry) holds no place on a node where it holds the key, except where an
// acquire refused it there, which flags the meta: placed while another
// held the key, its grant takes it out of line; retried as a waiter while
// it holds the key (a refresh), it takes no place; retried as a fresh
// acquire it is placed and the meta flagged. Its release leaves no line
// behind in any case.
func TestAttackLineTokenThatWaits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, raw := newNode(t, RedisOptions{Addr: addr}), rawClient(t, addr)
		ctx := testCtx(t)
		line := func(key string) int64 {
			return raw.Exists(ctx, DefaultPrefix+"line:"+key, DefaultPrefix+"line-deadline:"+key).Val()
		}
		t0 := time.Now()
		// Placed while another holds the key, then granted.
		mustAcquire(t, n, "k", hold("a", time.Minute))
		mustWait(t, n, "k", waiting("t", "t", t0))
		mustRelease(t, n, "k", "a", true)
		if c, err := n.Acquire(ctx, "k", waiting("t", "t", t0)); err != nil || c.State != quorum.Acquired {
			t.Fatal(c, err)
		}
		if got := line("k"); got != 0 {
			t.Fatalf("t's grant left its place (%d line keys)", got)
		}
		// Retried as a waiter while it holds the key: a refresh, no place.
		if c, err := n.Acquire(ctx, "k", waiting("t", "t", time.Now())); err != nil || c.State != quorum.Mine {
			t.Fatal(c, err)
		}
		if got := line("k"); got != 0 {
			t.Fatalf("a refresh took a place (%d line keys)", got)
		}
		// Retried fresh while it holds the key: placed, and the meta flagged.
		fresh := waiting("t", "t", time.Now())
		fresh.Fresh = true
		mustWait(t, n, "k", fresh)
		if m, err := readMeta(ctx, raw, "k"); err != nil || m["lined"] != "1" {
			t.Fatalf("meta %v, %v; want lined 1", m, err)
		}
		mustRelease(t, n, "k", "t", true)
		if got := line("k"); got != 0 {
			t.Fatalf("t's release left its own place (%d line keys)", got)
		}
	})
}

// TestAttackCountTakenBack: an acquire refused on a held key (its quiet
// path counts first, then takes the count back) leaves the node's counter
// where it was on a node of layout 3, and where the migration put it on a
// node of layout 2 or 1 or on one with no counter: at least every counter
// of the old layout, never above it, so that the next grant is its
// successor. Held by another token, by a key of another type, and by the
// token itself for a fresh acquire: the same; and a retry of the token
// whose meta is lost refreshes the hold with the counter as its fence.
func TestAttackCountTakenBack(t *testing.T) {
	for _, layout := range []string{"3", "2", "1", "none"} {
		for _, holder := range []string{"other", "foreign-type", "self-fresh", "self-retry"} {
			t.Run(layout+"/"+holder, func(t *testing.T) {
				addr := redistest.Start(t, redistest.Options{}).Addr()
				n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
				var old int64
				switch layout {
				case "3":
					mustAcquire(t, n, "warm", hold("x", time.Minute))
					mustAcquire(t, n, "warm2", hold("x", time.Minute))
					old = 2
				case "2":
					old = 90
					raw.HSet(ctx, "lockproxy:layout", "version", "2", "fence", old)
					raw.HSet(ctx, "lockproxy:fence-floor", "layout", "2", "see", "lockproxy:layout")
					raw.HSet(ctx, "lockproxy:fence-max", "layout", "2", "see", "lockproxy:layout")
				case "1":
					old = 70
					raw.Set(ctx, "lockproxy:fence-floor", 50, 0)
					raw.Set(ctx, "lockproxy:fence-max", old, 0)
					raw.Set(ctx, "lockproxy:fence:k", 60, 0)
				}
				switch holder {
				case "other":
					raw.Set(ctx, "k", "other", time.Minute) // a hold whose meta is lost, or another's lock
				case "foreign-type":
					raw.HSet(ctx, "k", "owner", "someone")
				case "self-fresh", "self-retry": // its meta lost (or of layout 2)
					raw.Set(ctx, "k", "t", time.Minute)
				}
				h := hold("t", time.Minute)
				h.Fresh = holder != "self-retry"
				want := quorum.Taken
				if !h.Fresh {
					want = quorum.Mine // the hold's fence unknown: the node's counter stands for it
				}
				c, err := n.Acquire(ctx, "k", h)
				if err != nil || c.State != want || !h.Fresh && c.Fence != old {
					t.Fatalf("Acquire(k) over %s = %+v, %v; want state %d (fence %d for a refresh)", holder, c, err, want, old)
				}
				got, err := nodeCounter(ctx, raw)
				if err != nil || got != old {
					t.Fatalf("the node's counter after a refused acquire = %d, %v; want %d", got, err, old)
				}
				if c.Counter != old {
					t.Errorf("the refusal reports counter %d, want %d", c.Counter, old)
				}
				if m, err := readMeta(ctx, raw, "k"); h.Fresh && err == nil {
					t.Errorf("a refused acquire wrote a meta %v", m)
				} else if !h.Fresh && (err != nil || m["lined"] != "" || m["fence"] != fmt.Sprint(old)) {
					t.Errorf("the refresh's meta %v, %v; want fence %d and lined unknown", m, err, old)
				}
				if c, err := n.Acquire(ctx, "free", hold("t", time.Minute)); err != nil || c.State != quorum.Acquired || c.Fence != old+1 {
					t.Errorf("the next grant = %+v, %v; want fence %d", c, err, old+1)
				}
			})
		}
	}
}

// TestAttackLateAttemptAfterUndo: an acquire attempt that lands after a
// release marked it undone takes nothing and counts nothing, on the quiet
// path's key (free, nobody in line) and with a waiter to place or a next
// waiter to place; a rollback of an attempt whose hold a retry refreshed
// since deletes nothing; a release bound to the first attempt leaves a
// hold the retry refreshed.
func TestAttackLateAttemptAfterUndo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "warm", hold("x", time.Minute))
		for i, shape := range []string{"quiet", "waiter", "next"} {
			key := fmt.Sprintf("k%d", i)
			before, _ := nodeCounter(ctx, raw)
			// The release (by the same instance, giving up) lands first.
			if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: key, Token: "t", Undo: "a1", UndoFor: time.Minute}); r.Err != nil || r.OK {
				t.Fatalf("%s: release before the attempt = %+v", shape, r)
			}
			h := hold("t", time.Minute)
			switch shape {
			case "waiter":
				h.Waiter = &engine.Waiter{ID: "t", Since: time.Now(), Keep: time.Minute}
			case "next":
				h.Next = &engine.Waiter{ID: "t2", Since: time.Now(), Keep: time.Minute}
			}
			c := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: key, Hold: h, Attempt: "a1"})
			if c.Err != nil || c.Claim.State != quorum.Taken {
				t.Fatalf("%s: the late attempt = %+v; want taken", shape, c)
			}
			if after, _ := nodeCounter(ctx, raw); after != before {
				t.Errorf("%s: the late attempt moved the counter %d -> %d", shape, before, after)
			}
			if got := raw.Exists(ctx, key, "lockproxy:meta:"+key, "lockproxy:line:"+key).Val(); got != 0 {
				t.Errorf("%s: the late attempt left %d of the key, its meta and its line", shape, got)
			}
		}
		// r1 took the key; a retry r2 (LOCK ... TOKEN through another
		// instance) refreshed it; r1's rollback and a release bound to r1
		// land late: the hold stays.
		r1 := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "r", Hold: hold("t", time.Minute), Attempt: "r1"})
		if r1.Err != nil || r1.Claim.State != quorum.Acquired {
			t.Fatal(r1)
		}
		r2 := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "r", Hold: hold("t", time.Minute), Attempt: "r2"})
		if r2.Err != nil || r2.Claim.State != quorum.Mine || r2.Claim.Fence != r1.Claim.Fence {
			t.Fatalf("the retry = %+v; want mine with fence %d", r2, r1.Claim.Fence)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "r", Token: "t", Attempt: "r1", Undo: "r1", UndoFor: time.Minute, Rollback: true}); r.Err != nil || r.OK {
			t.Fatalf("r1's rollback after the retry = %+v; want nothing deleted", r)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "r", Token: "t", Attempt: "r1"}); r.Err != nil || r.OK {
			t.Fatalf("a release bound to r1 after the retry = %+v; want nothing deleted", r)
		}
		if e := mustInspect(t, n, "r"); e.Token != "t" || e.Fence != r1.Claim.Fence {
			t.Fatalf("Inspect(r) = %+v", e)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "r", Token: "t", Attempt: "r2"}); r.Err != nil || !r.OK {
			t.Fatalf("a release bound to r2 = %+v; want deleted", r)
		}
	})
}

// TestAttackLateCommit: a commit that lands after its hold was released
// and the key granted again (to another token, or to the same token by a
// later attempt) raises the counter, never lowers it, and changes the new
// hold's fence only upward: the new holder's fence is never reported
// below the one it was told. A commit that lands on a node restarted
// empty since the grant raises the new counter to the fence.
func TestAttackLateCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		for _, regrant := range []string{"other", "same-token"} {
			key := "k-" + regrant
			a1 := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: key, Hold: hold("t", time.Minute), Attempt: "a1"})
			if a1.Err != nil || a1.Claim.State != quorum.Acquired {
				t.Fatal(a1)
			}
			mustRelease(t, n, key, "t", true)
			tok, att := "u", "b1"
			if regrant == "same-token" {
				tok, att = "t", "a2"
			}
			b := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: key, Hold: hold(tok, time.Minute), Attempt: att})
			if b.Err != nil || b.Claim.State != quorum.Acquired || b.Claim.Fence <= a1.Claim.Fence {
				t.Fatal(b)
			}
			// a1's commit, with the fence its majority gave (here its own).
			n.do(ctx, &quorum.Op{Kind: quorum.OpCommit, Key: key, Token: "t", Fence: a1.Claim.Fence, Attempt: "a1"})
			if e := mustInspect(t, n, key); e.Token != tok || e.Fence != b.Claim.Fence {
				t.Errorf("%s: after a1's late commit Inspect = %+v; want %s with fence %d", regrant, e, tok, b.Claim.Fence)
			}
			if got, _ := nodeCounter(ctx, raw); got < b.Claim.Fence {
				t.Errorf("%s: the counter went back to %d below %d", regrant, got, b.Claim.Fence)
			}
		}
		// Restarted empty between a grant and its commit.
		g := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "e", Hold: hold("t", time.Minute), Attempt: "e1"})
		if g.Err != nil || g.Claim.State != quorum.Acquired {
			t.Fatal(g)
		}
		raw.FlushAll(ctx)
		fence := g.Claim.Fence + 40 // the majority's
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpCommit, Key: "e", Token: "t", Fence: fence, Attempt: "e1"}); r.Err != nil || r.OK {
			t.Fatalf("commit on the emptied node = %+v; want not held", r)
		}
		if c, err := n.Acquire(ctx, "e", hold("u", time.Minute)); err != nil || c.State != quorum.Acquired || c.Fence != fence+1 {
			t.Errorf("the next grant on the emptied node = %+v, %v; want fence %d", c, err, fence+1)
		}
	})
}

// TestAttackMetaEncoding: the meta keeps tokens and names of any length
// and bytes, the empty token among them (the scripts' own floor: the
// commands give an empty token a random one), through an acquire, a
// commit, a renewal, a refresh, a waiter's flag and a release; and a
// meta that is not one layout 3 wrote (unreadable, truncated, another
// token's, longer than layout 3 writes, another type) reads as a meta
// lost: the hold is still held and released, its fence unknown, and a
// waiter placed beside it is woken.
func TestAttackMetaEncoding(t *testing.T) {
	long := strings.Repeat("7:abc:", 20000) // 120 kB of lengths and colons
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		ps := rawSubscribe(t, raw, defaultChannel)
		for i, token := range []string{"", "0:", "8:", long, "\x00", "1:x1:y"} {
			key := fmt.Sprintf("k%d", i)
			h := engine.Hold{Token: token, TTL: time.Minute, Mode: engine.Bound, Name: long[:i*7]}
			c, err := n.Acquire(ctx, key, h)
			if err != nil || c.State != quorum.Acquired {
				t.Fatalf("token %d: Acquire = %+v, %v", i, c, err)
			}
			if ok, err := n.Commit(ctx, key, token, c.Fence+3); err != nil || !ok {
				t.Fatalf("token %d: Commit = %v, %v", i, ok, err)
			}
			if ttl, err := n.Extend(ctx, key, token, 0, engine.Lease); err != nil || ttl != time.Minute {
				t.Fatalf("token %d: Extend = %v, %v", i, ttl, err)
			}
			if r, err := n.Acquire(ctx, key, h); err != nil || r.State != quorum.Mine || r.Fence != c.Fence+3 {
				t.Fatalf("token %d: refresh = %+v, %v", i, r, err)
			}
			e := mustInspect(t, n, key)
			if e.Token != token || e.Fence != c.Fence+3 || e.Mode != engine.Bound || e.Name != h.Name {
				t.Fatalf("token %d: Inspect = %+v", i, e)
			}
			mustWait(t, n, key, waiting("w", "w", time.Now()))
			mustRelease(t, n, key, token, true)
			wakes(t, ps, fmt.Sprintf("%d:%s%s", len(token), token, key))
			if ok, err := n.leave(ctx, key, "w"); err != nil || !ok {
				t.Fatal(ok, err)
			}
			wakes(t, ps, "1:w"+key)
		}
		meta := "lockproxy:meta:m"
		for _, bad := range []func(){
			func() { raw.Set(ctx, meta, "garbage", time.Minute) },
			func() { raw.Set(ctx, meta, "1:a1:5", time.Minute) },
			func() { raw.Set(ctx, meta, "99999999999999999999:a", time.Minute) },
			func() { raw.Set(ctx, meta, "-1:a2:99", time.Minute) },
			func() {
				raw.Set(ctx, meta, encodeMeta(map[string]string{"token": "b", "fence": "99", "attempt": "x", "took": "1", "lined": "0"}), time.Minute)
			},
			func() {
				raw.Set(ctx, meta, encodeMeta(map[string]string{"token": "a", "fence": "99", "lined": "0"})+"5:extra", time.Minute)
			},
			func() { raw.Del(ctx, meta); raw.RPush(ctx, meta, "a") },
		} {
			mustAcquire(t, n, "m", hold("a", time.Minute))
			bad()
			mustWait(t, n, "m", waiting("w", "w", time.Now()))
			e := mustInspect(t, n, "m")
			if e.Token != "a" {
				t.Fatalf("Inspect beside a foreign meta = %+v", e)
			}
			mustRelease(t, n, "m", "a", true)
			wakes(t, ps, "1:am")
			if ok, err := n.leave(ctx, "m", "w"); err != nil || !ok {
				t.Fatal(ok, err)
			}
			wakes(t, ps, "1:wm")
			raw.Del(ctx, meta)
		}
	})
}

// TestAttackMixedVersionsLine: an instance of layout 2 and one of layout 3
// on one node, one key: the layout-2 hold (a meta hash) with a layout-2
// waiter in line survives the node's migration by layout 3; a layout-3
// waiter placed beside it cannot flag its meta (a hash) and need not (a
// meta of another type is a meta lost: the release looks); the layout-2
// holder's release through either version wakes the line; the next grants
// (layout 3's) are above every layout-2 fence, and layout 2 grants, places
// and counts nothing from then on. A layout-2 extension of a layout-3 hold
// whose meta was lost writes a hash meta: a layout-3 waiter placed beside
// it is woken by the release too.
func TestAttackMixedVersionsLine(t *testing.T) {
	for _, releasedBy := range []string{"layout2", "layout3"} {
		t.Run(releasedBy, func(t *testing.T) {
			addr := redistest.Start(t, redistest.Options{}).Addr()
			n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
			ps := rawSubscribe(t, raw, defaultChannel)
			var largest int64
			grant2 := func(key, token string) {
				t.Helper()
				v, err := runLayout2(ctx, n, raw, layout2AcquireOp(key, token, false))
				r, ok := v.([]any)
				if err != nil || !ok || r[0] != int64(1) {
					t.Fatalf("layout 2's acquire of %s = %v, %v", key, v, err)
				}
				largest = max(largest, r[2].(int64))
			}
			grant2("k", "old")
			// Layout 2's waiter, refused and placed by layout 2.
			op := layout2AcquireOp("k", "w2", false)
			op.Hold.Fresh = false
			op.Hold.Waiter = &engine.Waiter{ID: "w2", Since: time.Now(), Keep: time.Minute}
			if v, err := runLayout2(ctx, n, raw, op); err != nil || v.([]any)[0] != int64(0) {
				t.Fatalf("layout 2's waiter = %v, %v", v, err)
			}
			// Layout 3 migrates the node through another key, and places
			// its own waiter beside layout 2's hold.
			c, err := n.Acquire(ctx, "other", hold("new", time.Minute))
			if err != nil || c.State != quorum.Acquired || c.Fence <= largest {
				t.Fatalf("layout 3's first grant = %+v, %v; want above %d", c, err, largest)
			}
			largest = c.Fence
			mustWait(t, n, "k", waiting("w3", "w3", time.Now()))
			if typ := raw.Type(ctx, "lockproxy:meta:k").Val(); typ != "hash" {
				t.Fatalf("the layout-2 hold's meta is a %s", typ)
			}
			// Layout 2 can no longer place, grant nor count.
			late := layout2AcquireOp("k", "w4", false)
			late.Hold.Fresh = false
			late.Hold.Waiter = &engine.Waiter{ID: "w4", Since: time.Now(), Keep: time.Minute}
			if v, err := runLayout2(ctx, n, raw, late); err == nil {
				t.Fatalf("layout 2's waiter after the migration = %v", v)
			}
			if s := raw.ZScore(ctx, "lockproxy:line:k", "w4"); s.Err() == nil {
				t.Fatalf("layout 2 placed a waiter after the migration")
			}
			rel := &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "old"}
			if releasedBy == "layout2" {
				if v, err := runLayout2(ctx, n, raw, rel); err != nil || v.([]any)[0] != int64(1) {
					t.Fatalf("layout 2's release of its hold = %v, %v", v, err)
				}
			} else if r := n.do(ctx, rel); r.Err != nil || !r.OK {
				t.Fatalf("layout 3's release of layout 2's hold = %+v", r)
			}
			wakes(t, ps, "3:oldk")
			// The oldest waiter goes first, with a fence above all.
			if c, err := n.Acquire(ctx, "k", waiting("w3", "w3", time.Now())); err != nil || c.State != quorum.Taken {
				t.Fatalf("w3 overtook w2: %+v, %v", c, err)
			}
			c, err = n.Acquire(ctx, "k", waiting("w2", "w2", time.Now()))
			if err != nil || c.State != quorum.Acquired || c.Fence <= largest {
				t.Fatalf("w2 = %+v, %v; want acquired above %d", c, err, largest)
			}
			if m, err := readMeta(ctx, raw, "k"); err != nil || m["lined"] != "1" {
				t.Fatalf("w2's meta %v, %v; want lined 1 (w3 waits)", m, err)
			}
			// A layout-3 hold whose meta was lost, extended by layout 2.
			raw.Del(ctx, "lockproxy:meta:k")
			if v, err := runLayout2(ctx, n, raw, &quorum.Op{Kind: quorum.OpExtend, Key: "k", Token: "w2", TTL: time.Minute}); err != nil {
				t.Fatalf("layout 2's extension of a hold with no meta = %v, %v", v, err)
			}
			if typ := raw.Type(ctx, "lockproxy:meta:k").Val(); typ != "hash" {
				t.Fatalf("layout 2's extension left a meta of type %s, want its hash", typ)
			}
			mustWait(t, n, "k", waiting("w5", "w5", time.Now()))
			mustRelease(t, n, "k", "w2", true)
			wakes(t, ps, "2:w2k")
			if got, err := nodeCounter(ctx, raw); err != nil || got < c.Fence {
				t.Fatalf("the node's counter %d, %v; below %d", got, err, c.Fence)
			}
		})
	}
}

// TestAttackLayoutKeyLostUnderLayout2: the node's counter (the layout key)
// is lost while a layout-3 hold is held and an instance of layout 2 still
// runs (an operator's DEL, or eviction under a maxmemory-policy other than
// noeviction: the node keeps its data, so the restart rule does not see
// it). Layout 2's settle then finds no counter and makes the node layout 2
// again; its acquire refused on the held key places its waiter in line
// without flagging the layout-3 meta (lined '0'), and the holder's release
// skips the line: the waiter is not woken, and tries again only after a
// third of its keep. (The same loss restarts the counter of either layout
// at the old layout's floor: fences go back, which the restart rule
// prevents only for a node that restarted.)
func TestAttackLayoutKeyLostUnderLayout2(t *testing.T) {
	t.Skip("known: a layout key lost while layout 2 still runs lets layout 2 place an unflagged waiter beside a layout-3 hold (lost wake-up, bounded by the waiter's retry); the counter's loss itself sends fences back in any layout")
	addr := redistest.Start(t, redistest.Options{}).Addr()
	n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
	ps := rawSubscribe(t, raw, defaultChannel)
	mustAcquire(t, n, "k", hold("a", time.Minute))
	raw.Del(ctx, "lockproxy:layout")
	op := layout2AcquireOp("k", "w2", false)
	op.Hold.Fresh = false
	op.Hold.Waiter = &engine.Waiter{ID: "w2", Since: time.Now(), Keep: time.Minute}
	if v, err := runLayout2(ctx, n, raw, op); err != nil {
		t.Fatalf("layout 2's waiter = %v, %v", v, err)
	}
	if raw.ZScore(ctx, "lockproxy:line:k", "w2").Err() != nil {
		t.Fatalf("layout 2 placed no waiter")
	}
	mustRelease(t, n, "k", "a", true)
	wakes(t, ps, "1:ak")
}

// TestAttackLayout1HoldAcrossMigration: a key held through layout 1 (its
// meta a hash, its fence from the key's own counter) while layout 3
// migrates the node: a refresh of it (its holder retrying through this
// version) is told the node's counter, at least the layout-1 fence; a
// waiter placed beside it is woken by its release.
func TestAttackLayout1HoldAcrossMigration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		ps := rawSubscribe(t, raw, defaultChannel)
		raw.Set(ctx, "lockproxy:fence-floor", 500, 0)
		v, err := runLayout1Acquire(ctx, raw, "held", "old")
		r, ok := v.([]any)
		if err != nil || !ok || r[0] != int64(1) {
			t.Fatalf("layout 1's acquire = %v, %v", v, err)
		}
		fence := r[2].(int64)
		c, err := n.Acquire(ctx, "other", hold("new", time.Minute))
		if err != nil || c.State != quorum.Acquired || c.Fence <= fence {
			t.Fatalf("layout 3's first grant = %+v, %v; want above %d", c, err, fence)
		}
		mustWait(t, n, "held", waiting("w", "w", time.Now()))
		if got, err := n.Acquire(ctx, "held", hold("old", time.Minute)); err != nil || got.State != quorum.Mine || got.Fence < fence {
			t.Fatalf("the layout-1 holder's retry = %+v, %v; want mine with a fence of at least %d", got, err, fence)
		}
		mustRelease(t, n, "held", "old", true)
		wakes(t, ps, "3:oldheld")
		if got, err := n.Acquire(ctx, "held", waiting("w", "w", time.Now())); err != nil || got.State != quorum.Acquired || got.Fence <= c.Fence {
			t.Fatalf("the waiter = %+v, %v; want acquired above %d", got, err, c.Fence)
		}
	})
}
