package luascript

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

func mustNormalize(t *testing.T, src string) string {
	t.Helper()
	form, err := Normalize([]byte(src))
	if err != nil {
		t.Fatalf("Normalize(%q): %v", src, err)
	}
	return form
}

func TestNormalizeEquivalents(t *testing.T) {
	base := `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	for _, v := range []string{
		"if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
		"if redis.call([[get]], KEYS[1]) == ARGV[1] then return redis.call([==[del]==], KEYS[1]) else return 0 end",
		"if redis.call(\"GET\", KEYS[1]) == ARGV[1] then return redis.call(\"Del\", KEYS[1]) else return 0 end",
		"if redis.call(\"\\103\\101\\116\", KEYS[1]) == ARGV[1] then return redis.call(\"d\\el\", KEYS[1]) else return 0 end",
		"if redis.call([[\nget]], KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0x0 end",
		"-- release\r\nif redis.call ( 'get' , KEYS [ 1 ] ) == ARGV [ 1 ] then --[[ owner ]] return\n\tredis.call('del', KEYS[1])\n" +
			"else return 0.0 --[==[ not ours\n]] ]==]\nend -- done",
	} {
		if got, want := mustNormalize(t, v), mustNormalize(t, base); got != want {
			t.Errorf("Normalize(%q)\n = %s\nwant %s", v, got, want)
		}
	}
}

func TestNormalizeDistinct(t *testing.T) {
	for _, pair := range [][2]string{
		{`return "a"`, `return "A"`},                                   // only command names fold case
		{`return redis.call(x, "GET")`, `return redis.call(x, "get")`}, // only the first argument
		{`return redis.pcall("GET")`, `return redis.pcall("get ")`},
		{`return 1`, `return "1"`},
		{`return a.b`, `return a .. b`},
		{`return a == b`, `return a = = b`},
		{`return -1`, `return 1`},
		{`return "a\0b"`, `return "a"`},
		{`local x = [[a]]`, `local x = [=[a]]]=]`},
	} {
		if a, b := mustNormalize(t, pair[0]), mustNormalize(t, pair[1]); a == b {
			t.Errorf("%q and %q both normalise to %s", pair[0], pair[1], a)
		}
	}
}

func TestNormalizeForm(t *testing.T) {
	got := mustNormalize(t, "local s = 'a\\tb\"c' .. [[\r\nx\\y]] -- c\nreturn redis.call('PTTL', s, 0x10, 1e2)")
	want := `local s = "a\009b\"c" .. "x\\y" return redis . call ( "pttl" , s , 16 , 100 )`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestNormalizeErrors(t *testing.T) {
	for _, src := range []string{
		`return "abc`, "return 'a\nb'", `return [[abc`, `return [==[abc]=]`, "--[[ never closed",
		`return [=x`, `return 3x`, `return 0x`, `return 1e`, `return "\256"`,
		`return "\`,
	} {
		_, err := Normalize([]byte(src))
		var lexErr *LexError
		if !errors.As(err, &lexErr) {
			t.Errorf("Normalize(%q) = %v, want a *LexError", src, err)
		}
	}
}

// TestNormalizeLinear feeds inputs built to trip a quadratic scanner, each
// at two sizes 64 times apart: a linear scanner takes about 64 times as
// long on the larger, a quadratic one about 4096 times (minutes for 512
// KiB). The bound is on that ratio, 512, not on a time: each size's fastest
// of three runs (load only adds time), the smaller counted as at least
// 10 ms so that timer noise and GC on a tiny input cannot fail it.
func TestNormalizeLinear(t *testing.T) {
	const n = 1 << 19
	inputs := []func(n int) string{
		func(n int) string { return strings.Repeat("[", n) },
		func(n int) string { return strings.Repeat("[=", n/2) },
		func(n int) string { return strings.Repeat("--[==", n/5) },
		func(n int) string { return "--[[" + strings.Repeat("]=", n/2) },
		func(n int) string { return "[==[" + strings.Repeat("]=]", n/3) },
		func(n int) string { return "'" + strings.Repeat("\\", n) },
		func(n int) string { return strings.Repeat("a.", n/2) },
		func(n int) string { return strings.Repeat("redis.call(", n/11) },
		func(n int) string { return strings.Repeat("\r\n", n/2) },
		func(n int) string { return "[[" + strings.Repeat("\r", n) + "]]" },
		func(n int) string { return strings.Repeat("1", n) },
		func(n int) string { return strings.Repeat(" --\n", n/4) },
	}
	for _, input := range inputs {
		small, large := input(n/64), input(n)
		ts, tl := fastestNormalize(small), fastestNormalize(large)
		if tl > 512*max(ts, 10*time.Millisecond) {
			t.Errorf("Normalize of %q... took %v for %d bytes, %v for %d: not linear", large[:8], tl, len(large), ts, len(small))
		}
	}
}

// fastestNormalize is the shortest of three runs of Normalize on src.
func fastestNormalize(src string) time.Duration {
	fastest := time.Duration(math.MaxInt64)
	for range 3 {
		start := time.Now()
		Normalize([]byte(src))
		fastest = min(fastest, time.Since(start))
	}
	return fastest
}

// TestStringLiteralsMatchRedis checks the lexer's string and number values
// against Redis's own Lua: EVAL "return <literal>" must give what the
// literal normalised to, and fail to compile where Normalize fails.
func TestStringLiteralsMatchRedis(t *testing.T) {
	rc := dialRESP(t, redistest.Start(t, redistest.Options{}).Addr())
	for _, lit := range []string{
		`'a'`, `"a\"b"`, `'\a\b\f\n\r\t\v\\\'\"'`, `"\65\066\0677"`, `"\0"`, `"\255"`, `"\256"`, `"\q\z"`,
		"'a\\\nb'", "'a\\\r\nb'", "'a\\\n\rb'", "'a\nb'", `[[]]`, "[[\nx]]", "[[\r\nx\r\ny\n\rz\rw]]",
		"[==[a]]b]=]c]==]", "[[a]=]b]]", "[=[[[x]]]=]", "[[a[[b]]", "[=[a[=[b]=]", `[=x`, `"abc`, "[[x", `"\`, "'\\\r'",
	} {
		want, wantErr := rc.do("EVAL", "return "+lit, "0")
		form, err := Normalize([]byte("return " + lit))
		if (wantErr != nil) != (err != nil) {
			t.Errorf("%s: redis %v, Normalize %v", lit, wantErr, err)
			continue
		}
		if err != nil {
			continue
		}
		got, uerr := unquote(strings.TrimPrefix(form, "return "))
		if uerr != nil || want.Kind != Bulk || got != want.Str {
			t.Errorf("%s: redis %q, Normalize %s (%v)", lit, want.Str, form, uerr)
		}
	}
}

func TestNumeralsMatchRedis(t *testing.T) {
	rc := dialRESP(t, redistest.Start(t, redistest.Options{}).Addr())
	for _, num := range []string{
		"0", "10", "0x10", "0XfF", "1e2", "1E+2", "1e-2", ".5", "5.", "0x1p4", "0x.8", "1e400", "3x", "0x",
		"1e", "0x1p", "1.2.3", "00012", "0x1e", "123456789012345678901234567890",
	} {
		want, wantErr := rc.do("EVAL", "return string.format('%.17g', "+num+")", "0")
		form, err := Normalize([]byte(num))
		if (wantErr != nil) != (err != nil) {
			t.Errorf("%s: redis %v, Normalize %v", num, wantErr, err)
			continue
		}
		if err != nil {
			continue
		}
		v, _ := strconv.ParseFloat(form, 64)
		if form == "1e999" {
			v, _ = strconv.ParseFloat("inf", 64)
		}
		if got := redisArg(v); got != want.Str {
			t.Errorf("%s: redis %s, Normalize %s (%s)", num, want.Str, got, form)
		}
	}
}

// unquote reads Normalize's canonical string form.
func unquote(q string) (string, error) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return "", errors.New("not a canonical string")
	}
	var b strings.Builder
	for i := 1; i < len(q)-1; i++ {
		switch {
		case q[i] != '\\':
			b.WriteByte(q[i])
		case q[i+1] == '"' || q[i+1] == '\\':
			b.WriteByte(q[i+1])
			i++
		default:
			n, err := strconv.Atoi(q[i+1 : i+4])
			if err != nil {
				return "", err
			}
			b.WriteByte(byte(n))
			i += 3
		}
	}
	return b.String(), nil
}

func seedFromLibraryScripts(f *testing.F) {
	files, err := fs.Glob(sources, "scripts/*/*.lua")
	if err != nil || len(files) == 0 {
		f.Fatalf("no library scripts: %v", err)
	}
	for _, file := range files {
		src, err := sources.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
}

func FuzzNormalize(f *testing.F) {
	seedFromLibraryScripts(f)
	for _, s := range []string{"[[", "--[==[", `"\`, "'\\\r\n'", "0x1p4", "a..b...c", "[=["} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		form, err := Normalize(src)
		if err != nil {
			return
		}
		again, err := Normalize([]byte(form))
		if err != nil || again != form {
			t.Fatalf("Normalize is not stable on %q:\n%s\n%s (%v)", src, form, again, err)
		}
	})
}

func FuzzRecognize(f *testing.F) {
	seedFromLibraryScripts(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := Recognize(src)
		if err != nil {
			var unknown *UnknownError
			if !errors.As(err, &unknown) || err.Error() != unknownMsg {
				t.Fatalf("Recognize error %v is not an *UnknownError", err)
			}
			return
		}
		// A recognised script runs without panicking on any arguments.
		s.Run(context.Background(), newFakeLocks(), [][]byte{src}, [][]byte{src, src, src})
	})
}
