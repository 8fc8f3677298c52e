package luascript

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The value conversions of lua.go, checked against Redis's own.

var numberInputs = []string{
	"", " ", "10", " 10 ", "10 x", "0x10", " -0x10 ", "0X1F", "0x", "0xg", "0x1p4", "0x1P-2", "0x1.8", "0x.8",
	"0x1.", "1e3", "1e", "1e+", "1E-2", ".5", "5.", ".", "-.5", "+5", "--1", "+-1", "1e1.5", "0x1e", "00012",
	"inf", "-inf", "INF", "infinity", "infinit", "nan", "NaN", "-nan", "nan(12ab)", "nan(", "1e400", "-1e400",
	"\t\n12\v\f\r", "12\x00abc", "1_000", "0b101", "1.5e-3", "1.7976931348623157e308", "5e-324", "2.5e-330",
	"123456789012345678901234567890", "9007199254740993", "1e16", "1e17", "-0", "0.1",
}

func TestLuaToNumberMatchesRedis(t *testing.T) {
	rc := dialRESP(t, redistest.Start(t, redistest.Options{}).Addr())
	script := "local n = tonumber(ARGV[1]) if n == nil then return false end " +
		"if n ~= n then return 'nan' end return string.format('%.17g', n)"
	for _, in := range numberInputs {
		want, err := rc.do("EVAL", script, "0", in)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := luaStrToNumber(in)
		got := Reply{Kind: Null}
		if ok {
			got = Reply{Kind: Bulk, Str: redisArg(v)}
		}
		if !sameReply(want, got) {
			t.Errorf("tonumber(%q): redis %+v, ours %+v", in, want, got)
		}
	}
}

// TestExpireArgMatchesRedis checks expireArg against PEXPIRE and SET PX.
func TestExpireArgMatchesRedis(t *testing.T) {
	rc := dialRESP(t, redistest.Start(t, redistest.Options{}).Addr())
	inputs := append([]string{
		"0", "-0", "007", "+5", "5 ", "-5", "9223372036854775807", "9223372036854775806", "-9223372036854775808",
		"-9223372036854775809", "99999999999999999999", "1000000000000", "12345678901234567890123",
	}, numberInputs...)
	for _, in := range inputs {
		for _, cmd := range []string{"pexpire", "set"} {
			args := []string{"PEXPIRE", "missing-key", in}
			if cmd == "set" {
				args = []string{"SET", "k", "v", "PX", in}
			}
			_, wantErr := rc.do(args...)
			_, gotErr := expireArg(in, true, cmd)
			if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
				t.Errorf("%s %q: redis %v, ours %v", cmd, in, wantErr, gotErr)
			}
		}
	}
}

func TestGetRangeAndSubMatchRedis(t *testing.T) {
	rc := dialRESP(t, redistest.Start(t, redistest.Options{}).Addr())
	positions := []int64{-12, -6, -5, -4, -1, 0, 1, 2, 4, 5, 6, 12}
	for _, val := range []string{"", "a", "tok-1", "tok-1xyz"} {
		if _, err := rc.do("SET", "v", val); err != nil {
			t.Fatal(err)
		}
		for _, i := range positions {
			for _, j := range positions {
				want, err := rc.do("GETRANGE", "v", fmt.Sprint(i), fmt.Sprint(j))
				if err != nil || want.Str != getRange(val, i, j) {
					t.Errorf("GETRANGE %q %d %d: redis %q (%v), ours %q", val, i, j, want.Str, err, getRange(val, i, j))
				}
				want, err = rc.do("EVAL", "return string.sub(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))", "0",
					val, fmt.Sprint(i), fmt.Sprint(j))
				if err != nil || want.Str != strSub(val, i, j) {
					t.Errorf("string.sub(%q, %d, %d): redis %q (%v), ours %q", val, i, j, want.Str, err, strSub(val, i, j))
				}
			}
		}
	}
}

func TestString2ll(t *testing.T) {
	for in, want := range map[string]bool{
		"0": true, "1": true, "-1": true, "-0": false, "01": false, "+1": false, " 1": false, "": false,
		"-": false, "9223372036854775807": true, "9223372036854775808": false, strings.Repeat("1", 21): false,
	} {
		if _, ok := string2ll(in); ok != want {
			t.Errorf("string2ll(%q) ok = %v, want %v", in, ok, want)
		}
	}
}
