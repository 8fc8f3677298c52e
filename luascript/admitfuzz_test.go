package luascript

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// admitSeeds are generator inputs (admitgen_test.go) that spell the shapes
// issue 26 found or that the check must keep admitting, with a piece of
// the script each must generate.
var admitSeeds = []struct {
	name  string
	input []byte
	want  string
}{
	{"concat metatable (the issue's attack)", seed(1, gMeta, vArg, 0, vKey, 0, gCall, 0, 2, 0, 0, vVar, 0),
		"redis.call('del', KEYS[1] .. v1)"},
	{"function result in a derived key", seed(1, gFunc, vArg, 0, gCall, 0, 2, 0, 0, vFuncCall, 0, vNumber, 0),
		"redis.call('del', KEYS[1] .. f1(1))"},
	{"publish on ARGV[2]", seed(0, gCall, 0, 6, 1, vArg, 1, vArg, 0), "redis.call('publish', ARGV[2], ARGV[1])"},
	{"string metatable", seed(1, gTrick, vArg, 0, 0, gCall, 0, 2, 0, 0, vString, 5), "getmetatable('').__concat"},
	{"random member then a write", seed(1, gCall, 0, 11, 1, vKey, 0, gCall, 0, 1, 1, vKey, 0, vNumber, 0),
		"redis.call('srandmember', KEYS[1])\nredis.call('set', KEYS[1], 1)"},
	{"spop", seed(0, gCall, 1, 12, 1, vKey, 0), "redis.pcall('spop', KEYS[1])"},
	{"hash fields as key parts (Redisson)", seed(0, gIpairs, 2, gCall, 0, 2, 0, 0, vVar, 0),
		"for _, v1 in ipairs(redis.call('hkeys', KEYS[2])) do\nredis.call('del', KEYS[1] .. v1)"},
	{"counter as a key part", seed(1, gLocal, vReply, 1, 1, vKey, 0, gCall, 0, 1, 0, 0, vVar, 0, vArg, 0),
		"local v1 = redis.call('incr', KEYS[1])\nredis.call('set', KEYS[1] .. v1, ARGV[1])"},
	{"ARGV element replaced by a table", seed(1, gAssign, vTable, 0, 0, gCall, 0, 2, 0, 0, vArg, 0),
		"ARGV[1] = {}\nredis.call('del', KEYS[1] .. ARGV[1])"},
	{"tostring of a table", seed(0, gCall, 0, 2, 0, 0, vConvert, 0, vTable, 0), "KEYS[1] .. tostring({})"},
	{"unpack with bounds", seed(0, gTrick, vKey, 0, 3, 2), "unpack(KEYS, 1, 3)"},
	{"table.insert into ARGV", seed(1, gTrick, vTable, 0, 2, gCall, 0, 2, 0, 0, vArg, 0), "table.insert(ARGV, 1, {})"},
	{"a key reaching the prefix", seed(0, gCall, 0, 1, 0, 0, vString, 2, vNumber, 0), "redis.call('set', KEYS[1] .. \"lockproxy:\", 1)"},
	{"reply of a read as a key part", seed(0, gCall, 0, 0, 0, 1, vReply, 2, vString, 0), "KEYS[2] .. redis.call('hget', KEYS[2], \"victim\")"},
	{"flushall", seed(0, gCall, 0, 17), "redis.call('flushall')"},
	{"time in a read", seed(0, gCall, 0, 13), "redis.call('time')"},
	{"nested loops", seed(1, gNumFor, gIpairs, 0, gCall, 0, 4, 0, 0, vVar, 1, gCall, 0, 7, 1, vKey, 1), "for v1 = 1, 2 do"},
}

// TestAdmitSeedsSpellTheirScripts keeps the seed corpus meaningful: each
// seed generates the script its name describes.
func TestAdmitSeedsSpellTheirScripts(t *testing.T) {
	for _, s := range admitSeeds {
		if src := generate(s.input); !strings.Contains(src, s.want) {
			t.Errorf("%s: generated\n%s\nwant it to contain\n%s", s.name, src, s.want)
		}
	}
}

// FuzzAdmitOnRedis generates scripts from the input (admitgen_test.go),
// and runs each script the check admits on a real redis-server, watched by
// MONITOR: it must touch only keys and channels it was admitted for
// (admitoracle_test.go). go test runs the seeds; go test -fuzz explores.
func FuzzAdmitOnRedis(f *testing.F) {
	o := newOracle(f)
	for _, s := range admitSeeds {
		f.Add(s.input)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := generate(data)
		a, err := Admit([]byte(src))
		if err != nil {
			var ae *AdmitError
			if !errors.As(err, &ae) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("Admit error %q is not a one-line *AdmitError", err)
			}
			return
		}
		o.check(t, a, src, o.run(t, src))
	})
}

// TestAdmitOracleSeesEscapes: the oracle fails a script that leaves its
// keys; run here on the attack as if it had been admitted, so
// that the fuzz target's check is one that can fail.
func TestAdmitOracleSeesEscapes(t *testing.T) {
	o := newOracle(t)
	for _, src := range []string{
		"local t = setmetatable({}, {__concat = function(a, b) return ARGV[1] end})\nreturn redis.call('DEL', KEYS[1] .. t)",
		"return redis.call('publish', ARGV[2], 'taken:1:x' .. KEYS[1])",
	} {
		cmds := o.run(t, src)
		found := false
		for _, cmd := range cmds {
			for _, k := range o.keysOf(t, cmd) {
				found = found || !admittedKey(&Admitted{DerivesKeys: true}, k)
			}
		}
		if !found {
			t.Errorf("the oracle saw no key outside KEYS in %q: %q", src, cmds)
		}
		if _, err := Admit([]byte(src)); err == nil {
			t.Errorf("admitted %q", src)
		}
	}
}

// TestAdmitGeneratedOnRedis is a bounded run of FuzzAdmitOnRedis's check
// in the normal suite: 400 inputs from a fixed pseudo-random stream, so
// that CI covers more than the seeds without -fuzz.
func TestAdmitGeneratedOnRedis(t *testing.T) {
	o := newOracle(t)
	rng := rand.New(rand.NewPCG(26, 26))
	admitted := 0
	for i := 0; i < 400; i++ {
		data := make([]byte, 4+rng.IntN(40))
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		src := generate(data)
		a, err := Admit([]byte(src))
		if err != nil {
			continue
		}
		admitted++
		o.check(t, a, src, o.run(t, src))
	}
	if admitted < 50 {
		t.Fatalf("only %d of 400 generated scripts admitted: the generator no longer reaches the check's yes side", admitted)
	}
}
