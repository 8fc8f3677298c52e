package luascript

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Redisson's RReadWriteLock read-lock acquire (redisson 3.x,
// RedissonReadLock.tryLockInnerAsync): keys derived from KEYS[2] by
// concatenation.
const redissonReadLock = `local mode = redis.call('hget', KEYS[1], 'mode'); 
if (mode == false) then 
  redis.call('hset', KEYS[1], 'mode', 'read'); 
  redis.call('hset', KEYS[1], ARGV[2], 1); 
  redis.call('set', KEYS[2] .. ':1', 1); 
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); 
  redis.call('pexpire', KEYS[1], ARGV[1]); 
  return nil; 
end; 
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then 
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); 
  local key = KEYS[2] .. ':' .. ind;
  redis.call('set', key, 1); 
  redis.call('pexpire', key, ARGV[1]); 
  local remainTime = redis.call('pttl', KEYS[1]); 
  redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); 
  return nil; 
end;
return redis.call('pttl', KEYS[1]);`

// The scripts written for issue 13, outside the catalog.
const (
	pttlIfHeld = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PTTL', KEYS[1]) end return -3`

	reentrantLock = `
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`

	reentrantUnlock = `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return nil end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then return 0 end
redis.call('DEL', KEYS[1])
return 1`
)

func TestAdmitAccepts(t *testing.T) {
	for name, src := range map[string]string{
		"pttl if held":          pttlIfHeld,
		"reentrant lock":        reentrantLock,
		"reentrant unlock":      reentrantUnlock,
		"redisson read lock":    redissonReadLock,
		"loop over KEYS":        `for _, k in ipairs(KEYS) do redis.call('DEL', k) end return #KEYS`,
		"numeric loop":          `for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end`,
		"unpack KEYS":           `return redis.call('DEL', unpack(KEYS))`,
		"mset pairs":            `return redis.call('MSET', KEYS[1], ARGV[1], KEYS[2], ARGV[2])`,
		"local chain":           `local a = KEYS[1] local b = a .. ':x' b = b .. ARGV[1] return redis.call('GET', b)`,
		"spread argv after key": `return redis.call('HSET', KEYS[1], unpack(ARGV))`,
		"publish and time":      `redis.call('PUBLISH', KEYS[1], 'x') return redis.call('TIME')`,
		"pcall and replies":     `local r = redis.pcall('INCR', KEYS[1]) if type(r) == 'table' then return redis.error_reply('bad') end return redis.status_reply('OK')`,
		"functions":             `local function del(k) return 1 end local f = function() return redis.call('GET', KEYS[1]) end return f()`,
		"never returns":         `while true do end`,
		"no key command":        `return cjson.encode({1, 2})`,
		"publish from ARGV":     `redis.call(ARGV[4], KEYS[2], ARGV[1]) return #ARGV + #unpack(ARGV)`,
	} {
		a, err := Admit([]byte(src))
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
			continue
		}
		if a.SHA != SHA1([]byte(src)) {
			t.Errorf("%s: SHA %s", name, a.SHA)
		}
	}
}

func TestAdmitLearnsDerivedKeys(t *testing.T) {
	for src, want := range map[string]bool{
		reentrantLock: false, redissonReadLock: true,
		`local k = KEYS[1] local j = k return redis.call('GET', j)`:        false,
		`local k = KEYS[1] local j = k .. 'x' return redis.call('GET', j)`: true,
		`for _, k in ipairs(KEYS) do redis.call('DEL', k) end`:             false,
		`return redis.call('DEL', unpack(KEYS))`:                           false,
		`return redis.call('PUBLISH', KEYS[1] .. 'x', 'm')`:                true, // a channel is checked as a key
	} {
		a, err := Admit([]byte(src))
		if err != nil || a.DerivesKeys != want {
			t.Errorf("%q: DerivesKeys %v, %v; want %v", src, a != nil && a.DerivesKeys, err, want)
		}
	}
}

func TestAdmitLearnsTimeReads(t *testing.T) {
	for src, want := range map[string]bool{pttlIfHeld: true, reentrantLock: false, `return redis.call('ttl', KEYS[1])`: true} {
		a, err := Admit([]byte(src))
		if err != nil || a.ReadsTime != want {
			t.Errorf("%q: ReadsTime %v, %v; want %v", src, a != nil && a.ReadsTime, err, want)
		}
	}
}

// Redisson 3.22 and later: redis.call(ARGV[n], KEYS[2], ARGV[1]), with
// "publish" or "spublish" in ARGV[n].
func TestAdmitPublishFromARGV(t *testing.T) {
	for src, want := range map[string][]int{
		`redis.call(ARGV[4], KEYS[2], ARGV[1]) return 1`:                                   {4},
		`redis.pcall(ARGV[2], KEYS[2], ARGV[1]); redis.call(ARGV[4], KEYS[1], ARGV[1])`:    {2, 4},
		`redis.call(ARGV[3], KEYS[1], 'x') redis.call(ARGV[3], KEYS[2], 'y')`:              {3},
		`redis.call('publish', KEYS[1], 'x') return redis.call('GET', KEYS[1])`:            nil,
		`if redis.call('exists', KEYS[1]) == 0 then redis.call(ARGV[2], KEYS[2], 'm') end`: {2},
	} {
		a, err := Admit([]byte(src))
		if err != nil {
			t.Errorf("%q: refused: %v", src, err)
			continue
		}
		if fmt.Sprint(a.PublishFromARGV) != fmt.Sprint(want) {
			t.Errorf("%q: PublishFromARGV %v, want %v", src, a.PublishFromARGV, want)
		}
	}
	a, err := Admit([]byte(`redis.call(ARGV[2], KEYS[1], ARGV[1]) return 1`))
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"m", "publish"}, {"m", "PUBLISH"}, {"m", "SPublish", "x"}} {
		if err := a.CheckARGV(bytesOf(argv)); err != nil {
			t.Errorf("ARGV %q: %v", argv, err)
		}
	}
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"m", "flushall"}, "it takes a command from ARGV[2], which must be PUBLISH or SPUBLISH, not 'flushall'"},
		{[]string{"m", "del"}, "not 'del'"},
		{[]string{"m", "publish "}, "not 'publish '"},
		{[]string{"m"}, "only 1 arguments were given"},
		{nil, "only 0 arguments were given"},
		{[]string{"m", "pub\r\nlish"}, "not 'pub??lish'"},
	} {
		err := a.CheckARGV(bytesOf(c.argv))
		if err == nil || !strings.Contains(err.Error(), c.want) ||
			!strings.HasPrefix(err.Error(), "ERR lockproxy refused this script before running it on any node: ") ||
			strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("ARGV %q: %v, want %q", c.argv, err, c.want)
		}
	}
}

func bytesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func TestAdmitRefuses(t *testing.T) {
	for src, want := range map[string]string{
		`return redis.call('FLUSHALL')`:                                                        "line 1: redis.call('flushall'): FLUSHALL may not be used, it erases the node",
		`return redis.call('keys', '*')`:                                                       "KEYS may not be used, it reads keys that are not in KEYS",
		`return redis.call('CONFIG', 'SET', 'x', 'y')`:                                         "CONFIG may not be used, it administers the node",
		`return redis.call('SCAN', 0)`:                                                         "SCAN may not be used",
		"\n\nreturn redis.pcall('eval', 'return 1', 0)":                                        "line 3: redis.pcall('eval'): EVAL may not be used, it runs another script",
		`return redis.call('XADD', KEYS[1], '*', 'a', 1)`:                                      "XADD may not be used, it is not one of the data commands",
		`return redis.call('GET', ARGV[1])`:                                                    "argument 1 is a key and must come from KEYS",
		`return redis.call('GET', 'lock')`:                                                     "argument 1 is a key and must come from KEYS",
		`return redis.call('SET', KEYS[1], 1, 'GET') .. redis.call('GET', ARGV[1] .. KEYS[1])`: "argument 1 is a key",
		`return redis.call('MSET', KEYS[1], 1, ARGV[1], 2)`:                                    "argument 3 is a key",
		`return redis.call('RENAME', KEYS[1], ARGV[1])`:                                        "argument 2 is a key",
		`return redis.call('DEL', unpack(ARGV))`:                                               "argument 1 may expand to several values",
		`return redis.call('DEL', KEYS[1], ...)`:                                               "argument 2 may expand to several values",
		`local c = 'GET' return redis.call(c, KEYS[1])`:                                        "must name its command with a string literal",
		`return redis.call()`:                                                                  "must name its command with a string literal",
		`local k = KEYS[1] k = ARGV[1] return redis.call('GET', k)`:                            "argument 1 is a key",
		`local k = KEYS[1] .. 'x' or ARGV[1] return redis.call('GET', k)`:                      "argument 1 is a key",
		`for i, k in ipairs(ARGV) do redis.call('DEL', k) end`:                                 "argument 1 is a key",
		`for k, v in ipairs(KEYS) do redis.call('DEL', k) end`:                                 "argument 1 is a key",
		`local function f(k) return redis.call('GET', k) end return f(KEYS[1])`:                "argument 1 is a key",
		`KEYS[1] = ARGV[1] return redis.call('GET', KEYS[1])`:                                  "the script changes KEYS",
		`local KEYS = ARGV return redis.call('GET', KEYS[1])`:                                  "the script rebinds KEYS",
		`local t = KEYS return redis.call('GET', t[1])`:                                        "KEYS may be used only as",
		`table.insert(KEYS, ARGV[1]) return redis.call('DEL', unpack(KEYS))`:                   "KEYS may be used only as",
		`local ipairs = function(t) return pairs(ARGV) end`:                                    "the script rebinds ipairs",
		`local c = redis.call return c('FLUSHALL')`:                                            "redis.call is not allowed here",
		`local r = redis return r.call('FLUSHALL')`:                                            "redis may be used only as",
		`return loadstring("return redis.call('FLUSHALL')")()`:                                 "loadstring is not allowed",
		`return _G['redis'].call('FLUSHALL')`:                                                  "_G is not allowed",
		`return pcall(redis.call, 'FLUSHALL')`:                                                 "redis.call is not allowed here",
		`redis.call = function() end`:                                                          "the script changes redis",
		`return redis.setresp(3)`:                                                              "redis.setresp is not allowed",
		`return redis.call('GET', KEYS[1]:sub(2))`:                                             "argument 1 may expand",
		`return redis.call('GET', KEYS[1]:sub(2), 'x')`:                                        "argument 1 is a key",
		`return redis.call('GET', (KEYS[1]))`:                                                  "argument 1 is a key",
		`return redis.call('GET', KEYS[1]`:                                                     "cannot parse the script",
		`return 'unfinished`:                                                                   "cannot parse the script: unfinished string",
		`return redis.call('SET', KEYS[1] .. loadstring('x')(), 1)`:                            "loadstring is not allowed",
		`return redis.call("\0")`:                                                              "may not be used",
		`return redis.call('SORT', KEYS[1], 'BY', 'x*')`:                                       "SORT may not be used",
		`return redis.call(ARGV[1], KEYS[1])`:                                                  "", // see below: allowed shape, checked at run time
		`return redis.call(ARGV[0+1], KEYS[1], 'm')`:                                           "or with ARGV[n] for a literal n",
		`return redis.call(ARGV[0], KEYS[1], 'm')`:                                             "or with ARGV[n] for a literal n",
		`return redis.call(ARGV[i], KEYS[1], 'm')`:                                             "or with ARGV[n] for a literal n",
		`return redis.call(ARGV[1.5], KEYS[1], 'm')`:                                           "or with ARGV[n] for a literal n",
		`return redis.call(ARGV, KEYS[1], 'm')`:                                                "must name its command with a string literal",
		`return redis.call(KEYS[1], KEYS[1], 'm')`:                                             "must name its command with a string literal",
		`ARGV[2] = 'flushall' return redis.call(ARGV[2], KEYS[1], 'm')`:                        "line 1: the script takes a command from ARGV and may change ARGV",
		`local ARGV = {'flushall'} return redis.call(ARGV[1], KEYS[1], 'm')`:                   "takes a command from ARGV and may change ARGV",
		`table.remove(ARGV, 1) return redis.call(ARGV[2], KEYS[1], 'm')`:                       "takes a command from ARGV and may change ARGV",
		`local function f(ARGV) end return redis.call(ARGV[2], KEYS[1], 'm')`:                  "takes a command from ARGV and may change ARGV",
		`return redis.call(ARGV[2], KEYS[1], 'm', 'x')`:                                        "", // PUBLISH's arity is Redis's to check
		`return redis.call(ARGV[2], unpack(KEYS))`:                                             "",
	} {
		if want == "" {
			continue
		}
		_, err := Admit([]byte(src))
		var ae *AdmitError
		if !errors.As(err, &ae) {
			t.Errorf("%q: admitted (%v)", src, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "ERR lockproxy refused this script before running it on any node: line ") {
			t.Errorf("%q:\n got %s\nwant %s", src, err, want)
		}
		if strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("%q: the error is not one line: %q", src, err)
		}
	}
}

// TestAdmitCatalog: the catalogued library scripts pass the check too, so
// that the parser reads the real scripts' syntax; bsm/redislock v0.10's
// obtain builds MSETNX's keys in a table, which the check cannot follow
// (it runs as lock operations, being catalogued).
func TestAdmitCatalog(t *testing.T) {
	files, _ := fs.Glob(sources, "scripts/*/*.lua")
	for _, f := range files {
		src, _ := sources.ReadFile(f)
		_, err := Admit(src)
		switch {
		case f == "scripts/redislock/obtain-v0.10.0.lua":
			if err == nil || !strings.Contains(err.Error(), "line 32: redis.call('msetnx'): argument 1 may expand") {
				t.Errorf("%s: %v", f, err)
			}
		case strings.HasPrefix(f, "scripts/spring-integration/pubsub-"):
			// Spring publishes on ARGV[2]: catalogued, it publishes through
			// lockproxy's pub/sub, which checks the channel.
			if err == nil || !strings.Contains(err.Error(), "redis.call('publish'): argument 1 is a channel") {
				t.Errorf("%s: %v", f, err)
			}
		case err != nil:
			t.Errorf("%s: %v", f, err)
		}
	}
	if len(files) < 20 {
		t.Fatalf("only %d library scripts", len(files))
	}
}

// TestAdmitDepth: deep nesting is refused, not a stack overflow.
func TestAdmitDepth(t *testing.T) {
	src := "return " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000)
	if _, err := Admit([]byte(src)); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Fatalf("deep nesting: %v", err)
	}
}

// FuzzAdmit: the check never panics, refuses with an *AdmitError on one
// line, and whatever it admits passes a second, token-level check: every
// redis.call/pcall is followed by a string literal naming an allowed
// command, and neither KEYS nor redis nor a forbidden global is assigned.
func FuzzAdmit(f *testing.F) {
	seedFromLibraryScripts(f)
	for _, s := range []string{pttlIfHeld, reentrantLock, reentrantUnlock, redissonReadLock,
		`return redis.call('FLUSHALL')`, `local c = redis.call return c('x')`, `KEYS[1] = 'a'`,
		`for _, k in ipairs(KEYS) do redis.call('DEL', k) end`, `return redis.call('DEL', unpack(KEYS))`,
		`redis.call(ARGV[4], KEYS[2], ARGV[1]) return 1`, `ARGV[4] = 'del' redis.call(ARGV[4], KEYS[1])`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		a, err := Admit(src)
		if err != nil {
			var ae *AdmitError
			if !errors.As(err, &ae) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("Admit error %q is not a one-line *AdmitError", err)
			}
			return
		}
		toks, err := tokenize(src)
		if err != nil {
			t.Fatalf("admitted a script that does not lex: %v", err)
		}
		if a.SHA != SHA1(src) {
			t.Fatalf("SHA %s", a.SHA)
		}
		for i, tk := range toks {
			if tk.kind == tkName && (tk.text == "redis") && i+2 < len(toks) && toks[i+1].text == "." &&
				(i == 0 || toks[i-1].text != "." && toks[i-1].text != ":") && // not a field: A.redis.call
				(toks[i+2].text == "call" || toks[i+2].text == "pcall") {
				at := i + 3 // redis.call'get' is a call too
				name := toks[at]
				if name.kind != tkString && name.text == "(" && i+4 < len(toks) {
					at, name = i+4, toks[i+4]
				}
				if name.kind == tkName && name.text == "ARGV" {
					checkFuzzARGV(t, a, toks, at, src)
					continue
				}
				if name.kind != tkString {
					t.Fatalf("admitted redis.%s not followed by a literal command name: %q", toks[i+2].text, src)
				}
				if _, ok := allowed[strings.ToLower(unquoteCanonical(name.text))]; !ok {
					t.Fatalf("admitted a call of %s: %q", name.text, src)
				}
			}
			if tk.kind == tkName && forbidden[tk.text] && (i == 0 || toks[i-1].text != "." && toks[i-1].text != ":") {
				t.Fatalf("admitted a use of %s: %q", tk.text, src)
			}
			if tk.kind == tkName && tk.text == "local" && i+1 < len(toks) && fixed[toks[i+1].text] {
				t.Fatalf("admitted a local %s: %q", toks[i+1].text, src)
			}
		}
	})
}

// checkFuzzARGV: a call naming its command by ARGV was admitted only as
// ARGV[<decimal literal>] recorded in PublishFromARGV, and then the script
// neither assigns ARGV nor an element of it (simple forms).
func checkFuzzARGV(t *testing.T, a *Admitted, toks []token, at int, src []byte) {
	t.Helper()
	if at+3 >= len(toks) || toks[at+1].text != "[" || toks[at+3].text != "]" {
		t.Fatalf("admitted a command named by ARGV that is not ARGV[n]: %q", src)
	}
	n, err := strconv.Atoi(toks[at+2].text)
	if err != nil || !slices.Contains(a.PublishFromARGV, n) {
		t.Fatalf("admitted redis.call(ARGV[%s]) not recorded in %v: %q", toks[at+2].text, a.PublishFromARGV, src)
	}
	for j, tk := range toks {
		if tk.kind != tkName || tk.text != "ARGV" {
			continue
		}
		if j > 0 && toks[j-1].text == "local" || j+1 < len(toks) && toks[j+1].text == "=" ||
			j+4 < len(toks) && toks[j+1].text == "[" && toks[j+3].text == "]" && toks[j+4].text == "=" {
			t.Fatalf("admitted a script that takes a command from ARGV and assigns ARGV: %q", src)
		}
	}
}

// TestAdmitRedisson: every Redisson script replayed in instance/ passes the
// check: their derived keys' parts (':' .. key .. ':rwlock_timeout:' .. i,
// (counter+1), a thread id from LINDEX) are typed, and their channels come
// from KEYS.
func TestAdmitRedisson(t *testing.T) {
	files, err := filepath.Glob("../instance/testdata/redisson/*/*.lua")
	if err != nil || len(files) < 40 {
		t.Fatalf("%d Redisson scripts: %v", len(files), err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Admit(src); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestAdmitRefusesEscapes: issue 26's ways out of a script's keys, each
// refused before any node runs it.
func TestAdmitRefusesEscapes(t *testing.T) {
	for src, want := range map[string]string{
		// The reproduced attack: __concat returns ARGV[1].
		"local t = setmetatable({}, {__concat = function(a, b) return ARGV[1] end})\nreturn redis.call('DEL', KEYS[1] .. t)": "line 1: setmetatable is not allowed: a metatable",
		`local mt = getmetatable('') mt.__concat = nil return 1`:                                                             "getmetatable is not allowed",
		`local f = function() return ARGV[1] end return redis.call('DEL', KEYS[1] .. f())`:                                   "argument 1 is a key and must come from KEYS",
		`local function k(x) return x end return redis.call('DEL', KEYS[1] .. k(1))`:                                         "argument 1 is a key",
		`local t = {} return redis.call('DEL', KEYS[1] .. t)`:                                                                "argument 1 is a key",
		`local t = {} return redis.call('DEL', KEYS[1] .. tostring(t))`:                                                      "argument 1 is a key",
		`local x = cjson.decode(ARGV[1]) return redis.call('DEL', KEYS[1] .. x)`:                                             "argument 1 is a key",
		`local x = ARGV[1] x = {} return redis.call('DEL', KEYS[1] .. x)`:                                                    "argument 1 is a key",
		`ARGV[1] = {} return redis.call('DEL', KEYS[1] .. ARGV[1])`:                                                          "argument 1 is a key",
		`table.insert(ARGV, 1, {}) return redis.call('DEL', KEYS[1] .. ARGV[1])`:                                             "argument 1 is a key",
		`local x = redis.call('SET', KEYS[1], 1) return redis.call('DEL', KEYS[1] .. x)`:                                     "argument 1 is a key",
		`local x = redis.pcall('GET', KEYS[1]) return redis.call('DEL', KEYS[1] .. x)`:                                       "argument 1 is a key",
		`for _, v in pairs(ARGV) do redis.call('DEL', KEYS[1] .. v) end`:                                                     "argument 1 is a key",
		`local tostring = function() return 'x' end return 1`:                                                                "the script rebinds tostring",
		`return redis.call('DEL', KEYS[1] .. (KEYS[2] or {}))`:                                                               "argument 1 is a key",
		`return redis.call('SET', KEYS[1], unpack(ARGV, 1, 2147483647))`:                                                     "unpack with explicit bounds",
		`return unpack({}, 1, 1e9)`: "unpack with explicit bounds",
		// Channels are checked as keys.
		`return redis.call('publish', ARGV[1], ARGV[2])`:              "redis.call('publish'): argument 1 is a channel",
		`return redis.call('PUBLISH', 'lockproxy:released', ARGV[1])`: "argument 1 is a channel",
		`return redis.call(ARGV[2], ARGV[1], 'x')`:                    "argument 1 is a channel",
		`return redis.call('spublish', KEYS[1] .. {}, 'x')`:           "argument 1 is a channel",
		// Results that differ per node.
		`return redis.call('SPOP', KEYS[1])`:                                                           "SPOP may not be used, it removes a member picked at random",
		`local m = redis.call('SRANDMEMBER', KEYS[1]) return redis.call('SREM', KEYS[1], m)`:           "line 1: redis.call('srandmember'): SRANDMEMBER may not be used in a script that writes",
		`local f = redis.call('HRANDFIELD', KEYS[1]) redis.call('HDEL', KEYS[1], f)`:                   "HRANDFIELD may not be used in a script that writes",
		`redis.call('SET', KEYS[2], 1) return redis.call('ZRANDMEMBER', KEYS[1])`:                      "ZRANDMEMBER may not be used in a script that writes",
		"local t = redis.call('TIME')\nredis.call('SET', KEYS[1], t[1])":                               "line 1: redis.call('time'): TIME may not be used in a script that writes: it reads the node's clock",
		`local t = redis.pcall('TIME') return redis.call('PEXPIRE', KEYS[1], t[1])`:                    "redis.pcall('time'): TIME may not be used",
		`return redis.call('SET', KEYS[1], tostring({}))`:                                              "tostring of a value the check cannot type may not be used in a script that writes",
		`local function f(x) return tostring(x) end return redis.call('HSET', KEYS[1], 'a', f(print))`: "tostring of a value the check cannot type",
	} {
		_, err := Admit([]byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant %s", src, err, want)
		}
	}
}

// TestAdmitTypesDerivedKeys: the parts of a derived key the check can type.
func TestAdmitTypesDerivedKeys(t *testing.T) {
	for _, src := range []string{
		`return redis.call('GET', KEYS[1] .. ':' .. ARGV[1] .. 7)`,
		`local n = redis.call('INCR', KEYS[1]) return redis.call('SET', KEYS[1] .. ':' .. n, 1)`,
		`local n = tonumber(redis.call('HGET', KEYS[1], 'x')) return redis.call('DEL', KEYS[1] .. (n + 1))`,
		`for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do redis.call('DEL', KEYS[2] .. f) end`,
		`local fs = redis.call('HKEYS', KEYS[1]) for _, f in ipairs(fs) do for i = 1, 3 do redis.call('DEL', KEYS[2] .. f .. i) end end`,
		`local k = KEYS[1] .. ARGV[1] k = k .. '#' .. #ARGV return redis.call('GET', k)`,
		`return redis.call('PUBLISH', KEYS[1] .. ':' .. ARGV[1], 'm')`,
		`return redis.call('SRANDMEMBER', KEYS[1])`, // a script that only reads
		`return redis.call('TIME')`,
		`return redis.call('SET', KEYS[1], tostring(ARGV[1] + 1))`,
		`return tostring({})`, // a script that only reads
	} {
		if _, err := Admit([]byte(src)); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// TestAdmitLearnsTTLKeys: which keys of KEYS a script may give a TTL.
func TestAdmitLearnsTTLKeys(t *testing.T) {
	for src, want := range map[string]string{
		`return redis.call('PEXPIRE', KEYS[1], ARGV[1])`:                            "true [1]",
		`redis.call('EXPIRE', KEYS[2], 5) return redis.call('PEXPIRE', KEYS[1], 9)`: "true [1 2]",
		`for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, 5) end`:               "true []",
		`return redis.call('PEXPIRE', KEYS[1] .. ':x', 5)`:                          "true []",
		`return redis.call('GET', KEYS[1])`:                                         "false []",
	} {
		a, err := Admit([]byte(src))
		if err != nil || fmt.Sprint(a.SetsTTL, a.TTLKeys) != want {
			t.Errorf("%q: %v %v %v, want %s", src, a != nil && a.SetsTTL, a, err, want)
		}
	}
}
