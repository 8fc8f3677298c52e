package upstream

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

// oddBytes are field values that a length-prefixed encoding must carry
// whole: empty, separators, digits, binary and multibyte text, and lengths
// of one to four digits (meta.lua reads up to three from the bytes).
var oddBytes = []string{"", ":", "::", "0", "12", "3:abc", "\x00\xff\x01", "é名", "a:b\r\n",
	strings.Repeat(":", 10), strings.Repeat("7", 100), strings.Repeat("\x00", 999), strings.Repeat("1:", 500)}

// TestMetaField: the fields the instance encodes for acquire.lua (redis.go)
// are meta.lua's encode byte for byte, so that decodeMeta reads them back
// whatever their bytes.
func TestMetaField(t *testing.T) {
	for _, v := range oddBytes {
		m := map[string]string{}
		var s string
		for _, f := range metaFields {
			m[f] = v
			s += metaField(v)
		}
		if want := encodeMeta(m); s != want {
			t.Errorf("metaField(%q) x8 = %q; want %q", v, s, want)
		}
		got, err := decodeMeta(s)
		if err != nil || got["name"] != v || got["lined"] != v {
			t.Errorf("decodeMeta(%q) = %q, %v; want every field %q", s, got, err, v)
		}
	}
}

// TestAcquireMetaBytes: acquire.lua writes the meta from fields the instance
// encoded, and what it writes is layout 3's encode of the hold, byte for
// byte (instances of earlier builds read it), on each path that writes
// one: the quiet grant, a grant that places this instance's next waiter
// (lined), and a refresh (took '0').
func TestAcquireMetaBytes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		for i, v := range oddBytes {
			key := "k" + strconv.Itoa(i)
			h := engine.Hold{Token: "t" + v, TTL: 1500 * time.Millisecond, Mode: engine.Mode(v), Name: v}
			want := func(fence int64, took, lined string) string {
				return encodeMeta(map[string]string{"token": h.Token, "fence": strconv.FormatInt(fence, 10), "mode": v,
					"name": v, "ttl": "1500", "attempt": "", "took": took, "lined": lined})
			}
			check := func(what string, fence int64, took, lined string) {
				t.Helper()
				got, err := raw.Get(ctx, DefaultPrefix+"meta:"+key).Result()
				if w := want(fence, took, lined); err != nil || got != w {
					t.Errorf("%s of %q: meta %q, %v; want %q", what, v, got, err, w)
				}
			}
			c, err := n.Acquire(ctx, key, h)
			if err != nil || c.State != quorum.Acquired {
				t.Fatalf("Acquire(%q) = %+v, %v; want acquired", v, c, err)
			}
			check("quiet grant", c.Fence, "1", "0")
			c2, err := n.Acquire(ctx, key, h)
			if err != nil || c2.Fence != c.Fence {
				t.Fatalf("refresh of %q = %+v, %v; want fence %d", v, c2, err, c.Fence)
			}
			check("refresh", c.Fence, "0", "0")
			mustRelease(t, n, key, h.Token, true)
			h.Next = &engine.Waiter{ID: "next" + v, Since: time.Now(), Keep: time.Second}
			if c, err = n.Acquire(ctx, key, h); err != nil || c.State != quorum.Acquired {
				t.Fatalf("Acquire(%q, next) = %+v, %v; want acquired", v, c, err)
			}
			check("grant placing the next waiter", c.Fence, "1", "1")
		}
	})
}

// TestReleaseReadsOwnMeta: release.lua reads the attempt, took and lined of
// the token's own meta (the meta beginning with the token the instance
// encoded) as decode does, whatever bytes the other fields hold: a release
// bound to another attempt, or a rollback of a refreshed hold, deletes
// nothing; one bound to the hold's attempt deletes it and answers that
// attempt; a meta unreadable after the token describes nothing.
func TestReleaseReadsOwnMeta(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		for i, v := range oddBytes {
			key, att := "r"+strconv.Itoa(i), "a"+v
			h := engine.Hold{Token: v, TTL: time.Minute, Mode: engine.Mode(v), Name: v + v}
			acquire := func(state quorum.ClaimState) {
				t.Helper()
				if r := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: key, Hold: h, Attempt: att}); r.Err != nil || r.Claim.State != state {
					t.Fatalf("Acquire(%q) = %+v; want %v", v, r, state)
				}
			}
			acquire(quorum.Acquired)
			if r := releaseBound(t, n, key, v, att+"x", false); r.OK {
				t.Errorf("release of %q bound to another attempt deleted the hold", v)
			}
			acquire(quorum.Mine) // a refresh: took '0'
			if r := releaseBound(t, n, key, v, att, true); r.OK {
				t.Errorf("rollback of %q deleted a refreshed hold", v)
			}
			if r := releaseBound(t, n, key, v, att, false); !r.OK || r.Attempt != att {
				t.Errorf("release of %q bound to its attempt = %+v; want deleted, attempt %q", v, r, att)
			}
			acquire(quorum.Acquired)
			if r := releaseBound(t, n, key, v, att, true); !r.OK || r.Attempt != att {
				t.Errorf("rollback of %q bound to its attempt = %+v; want deleted, attempt %q", v, r, att)
			}
			// The token's field, then nothing readable: nobody's meta.
			acquire(quorum.Acquired)
			if err := raw.Set(ctx, DefaultPrefix+"meta:"+key, metaField(v)+"2:99:", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if r := releaseBound(t, n, key, v, att, false); r.OK {
				t.Errorf("release of %q bound to its attempt beside an unreadable meta deleted the hold", v)
			}
			if r := releaseBound(t, n, key, v, "", false); !r.OK || r.Attempt != "" {
				t.Errorf("release of %q beside an unreadable meta = %+v; want deleted, no attempt", v, r)
			}
		}
	})
}
