package upstream

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/quorum"
)

// findDecode is layout.lua's decode as builds up to 6d0601e ran it (with
// string.find and tonumber, and no reading from the bytes), the reading
// every instance sharing a node must agree on.
const findDecode = `
local function find_decode(s)
  local m, at, size = {}, 1, string.len(s)
  for _, f in ipairs(FIELDS) do
    local colon = string.find(s, ':', at, true)
    local n = colon and tonumber(string.sub(s, at, colon - 1))
    if not n or colon + n > size + 1 then
      return blank()
    end
    m[f] = string.sub(s, colon + 1, colon + n)
    at = colon + n + 1
  end
  return m
end
local odd = {}
for i, s in ipairs(ARGV) do
  local ok, want = pcall(find_decode, s)
  -- (gopher-lua's string.find fails past the end of s: that reading had
  -- no answer, and decode's is blank)
  if ok then
    local got = decode(s)
    for _, f in ipairs(FIELDS) do
      if got[f] ~= want[f] then
        table.insert(odd, i)
        break
      end
    end
  end
end
return odd
`

// oddMetas are metas no script writes: a written meta's fields with a
// length spelled otherwise (zeros, signs, spaces, hex, exponents,
// fractions, negative lengths that take the reading back, ones past the
// end), truncated, or with bytes added.
func oddMetas(r *rand.Rand, count int) []string {
	fields := []string{"t", "17", "lease", "n", "60000", "a1", "1", "0"}
	spell := func(n int) string {
		s := strconv.Itoa(n)
		switch r.Intn(14) {
		case 0:
			return "0" + s
		case 1:
			return " " + s
		case 2:
			return "+" + s
		case 3:
			return s + ".0"
		case 4:
			return fmt.Sprintf("0x%x", n)
		case 5:
			return s + "e0"
		case 6:
			return fmt.Sprintf("%d.%d", n+r.Intn(3)-1, 1+r.Intn(9))
		case 7:
			return strconv.Itoa(-r.Intn(60))
		case 8:
			return strconv.Itoa(n + r.Intn(4))
		case 9:
			return "nan"
		default:
			return s
		}
	}
	out := make([]string, 0, count)
	for range count {
		var b strings.Builder
		for _, f := range fields {
			if r.Intn(3) == 0 {
				f = strings.Repeat("9:", r.Intn(4)) + f
			}
			b.WriteString(spell(len(f)) + ":" + f)
		}
		s := b.String()
		switch r.Intn(4) {
		case 0:
			s = s[:r.Intn(len(s)+1)]
		case 1:
			s += []string{":", "1:", "0:", "9"}[r.Intn(4)]
		}
		out = append(out, s)
	}
	return out
}

// TestMetaDecodeMatchesFind: meta.lua's decode, which reads short
// lengths from the bytes, reads every meta as the string.find and
// tonumber decode of earlier builds does, on redis-server and miniredis:
// odd metas included, so that no instance of either build takes a meta
// the other finds unreadable (or reads its fields otherwise).
func TestMetaDecodeMatchesFind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx, raw := testCtx(t), rawClient(t, addr)
		metas := oddMetas(rand.New(rand.NewSource(1)), 3000)
		args := make([]any, len(metas))
		for i, m := range metas {
			args[i] = m
		}
		odd, err := raw.Eval(ctx, metaLua+findDecode, nil, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for i, at := range odd {
			if i == 10 {
				t.Errorf("... %d in all", len(odd))
				break
			}
			t.Errorf("decode(%q) differs from the string.find reading", metas[at-1])
		}
	})
}

// findOwn answers, for each meta, what the string.find decode says of the
// hold of token 't': '-' where the meta does not describe it, else its
// took and attempt ('1a1').
const findOwn = `
local out = {}
for i, s in ipairs(ARGV) do
  local ok, m = pcall(find_decode, s)
  if not ok then
    m = blank()
  end
  if m.token == 't' then
    out[i] = m.took .. '|' .. m.attempt
  else
    out[i] = '-'
  end
end
return out
`

// TestReleaseOwnMetaMatchesFind: release.lua's reading of the token's own
// meta (the meta starting with the token's field) answers as the
// string.find decode of earlier builds, on odd metas after that field: a
// release of any attempt answers the attempt the meta records, or none
// where the meta describes nothing, and a rollback bound to that attempt
// deletes the hold only where the meta says the attempt took it.
func TestReleaseOwnMetaMatchesFind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		metas := oddMetas(rand.New(rand.NewSource(2)), 400)
		args := make([]any, len(metas))
		for i := range metas {
			metas[i] = "1:t" + metas[i]
			args[i] = metas[i]
		}
		src := metaLua + strings.Split(findDecode, "local odd = {}")[0] + findOwn
		want, err := raw.Eval(ctx, src, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		plant := func(meta string) {
			t.Helper()
			if err := raw.MSet(ctx, "k", "t", DefaultPrefix+"meta:k", meta).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for i, meta := range metas {
			took, attempt, known := "", "", want[i] != "-"
			if known {
				took, attempt, _ = strings.Cut(want[i], "|")
			}
			plant(meta)
			if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "t"}); r.Err != nil || !r.OK || r.Attempt != attempt {
				t.Errorf("release beside %q = %+v; want deleted, attempt %q", meta, r, attempt)
			}
			bound := attempt // ('' binds to nothing)
			if bound == "" {
				bound = "a1"
			}
			del := known && attempt == bound && took == "1"
			plant(meta)
			r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "t", Attempt: bound, Rollback: true})
			if r.Err != nil || r.OK != del {
				t.Errorf("rollback bound to %q beside %q = %+v; want deleted %v", bound, meta, r, del)
			}
		}
	})
}
