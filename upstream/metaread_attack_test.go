package upstream

import (
	"strconv"
	"testing"
	"time"
)

// TestAttackMetaOddLengths: a meta whose lengths no script writes (a
// negative one, which moves the reading back, or a fractional one) reads
// as earlier builds read it (layout.lua's decode with string.find and
// tonumber): meta.lua's length reads digits from the bytes only at a
// whole position inside the string, so that a release's own-meta path and
// decode answer what an instance of an earlier build sharing the node
// answers. Read from a negative position, the digits at the string's end
// were taken as a field there and its overrun went unseen: a release bound
// to an attempt deleted a hold whose meta describes nothing.
func TestAttackMetaOddLengths(t *testing.T) {
	type oddMeta struct {
		holder, meta string
		fence        int64  // inspect's fence and name (0 and '' where
		name         string // the meta describes nothing)
		bound        bool   // a release bound to attempt a1 deletes
		attempt      string // the attempt a release of any attempt answers
	}
	cases := []oddMeta{
		// After the token, a length of -37 takes the reading back to the
		// last 29 bytes, whose last field (9:0ab) overruns the string.
		{holder: "t", meta: "1:t-37:xx5:lease1:n5:600002:a11:19:0ab"},
		// The token's field ends 9 bytes back from its start; the next
		// one runs past the end.
		{holder: "tok", meta: "-9:tok3:xyz"},
		// A length of 5.5 reads 'lease' and ends the next length's
		// reading mid-byte; the last field (1:) is one byte short, as
		// decode lets it be.
		{holder: "é", meta: "2:é1:55.5:lease1:n5:60000002:a11:11:", fence: 5, name: "n", bound: true, attempt: "a1"},
		// took's length 1.5 reads '1'; lined starts mid-byte and reads '0'.
		{holder: "t", meta: "1:t1:55:lease1:n5:600002:a11:1.51:0", fence: 5, name: "n", bound: true, attempt: "a1"},
	}
	// Lengths tonumber reads as 5 however they are written (05 and 005
	// take the byte path, the others string.match's): the mode
	// field reads 'lease' and the meta describes the hold. (Not 5e0:
	// redis-server's tonumber reads it, miniredis's does not, in every
	// build alike.) Lengths it cannot read leave the meta unreadable.
	for _, five := range []string{"05", "005", "0005", " 5", "\t5", "+5", "5 ", "5.0", "0x5"} {
		cases = append(cases, oddMeta{holder: "t", meta: "1:t1:5" + five + ":lease1:n5:600002:a11:11:0", fence: 5, name: "n", bound: true, attempt: "a1"})
	}
	for _, odd := range []string{"", "0x", "-0", "5-"} {
		cases = append(cases, oddMeta{holder: "t", meta: "1:t1:5" + odd + ":lease1:n5:600002:a11:11:0"})
	}
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		plant := func(key string, holder, meta string) {
			t.Helper()
			if err := raw.Set(ctx, key, holder, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if err := raw.Set(ctx, DefaultPrefix+"meta:"+key, meta, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range cases {
			key := "odd" + strconv.Itoa(i)
			plant(key, c.holder, c.meta)
			e, ok, err := n.Inspect(ctx, key)
			if err != nil || !ok || e.Token != c.holder || e.Fence != c.fence || e.Name != c.name {
				t.Errorf("Inspect beside %q = %+v, %v, %v; want %q fence %d name %q", c.meta, e, ok, err, c.holder, c.fence, c.name)
			}
			for _, rollback := range []bool{false, true} {
				plant(key, c.holder, c.meta)
				if r := releaseBound(t, n, key, c.holder, "a1", rollback); r.OK != c.bound {
					t.Errorf("release (rollback %v) bound to a1 beside %q = %+v; want deleted %v", rollback, c.meta, r, c.bound)
				}
			}
			plant(key, c.holder, c.meta)
			if r := releaseBound(t, n, key, c.holder, "", false); !r.OK || r.Attempt != c.attempt {
				t.Errorf("release beside %q = %+v; want deleted, attempt %q", c.meta, r, c.attempt)
			}
		}
	})
}
