package upstream

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
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
