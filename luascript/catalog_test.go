package luascript

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"
)

// libraryScripts maps every file under scripts/ (each one a library's
// script, byte for byte; see scripts/SOURCES.md) to its catalog entry.
var libraryScripts = map[string]string{
	"redis-io/release.lua":                            "compare-and-delete release",
	"laravel/release-lock.lua":                        "compare-and-delete release",
	"redlock-rb/unlock.lua":                           "compare-and-delete release",
	"redsync/delete-v4.0.3.lua":                       "compare-and-delete release",
	"redislock/release-v0.9.lua":                      "compare-and-delete release",
	"node-redlock/unlock-v3.1.2.lua":                  "compare-and-delete release",
	"redsync/touch.lua":                               "compare-and-pexpire extend",
	"redislock/refresh-v0.9.lua":                      "compare-and-pexpire extend",
	"node-redlock/extend-v3.1.2.lua":                  "compare-and-pexpire extend",
	"ioredis-lock/delifequal.lua":                     "ioredis-lock delifequal",
	"ioredis-lock/pexpireifequal.lua":                 "ioredis-lock pexpireifequal",
	"redsync/delete-v4.12.0.lua":                      "redsync delete (v4.12+)",
	"redsync/touch-with-setnx-v4.12.0.lua":            "redsync touch with SET NX (v4.12+)",
	"redislock/obtain-v0.9.4.lua":                     "redislock obtain (v0.9.4)",
	"redislock/pttl-v0.9.lua":                         "redislock pttl (v0.9)",
	"redislock/obtain-v0.10.0.lua":                    "redislock obtain (v0.10)",
	"redislock/release-v0.10.0.lua":                   "redislock release (v0.10)",
	"redislock/refresh-v0.10.0.lua":                   "redislock refresh (v0.10)",
	"redislock/pttl-v0.10.0.lua":                      "redislock pttl (v0.10)",
	"redis-py/release.lua":                            "redis-py Lock release",
	"redis-py/extend.lua":                             "redis-py Lock extend",
	"redis-py/reacquire.lua":                          "redis-py Lock reacquire",
	"node-redlock/acquire-v4.2.0.lua":                 "node-redlock acquire (v4, v5)",
	"node-redlock/acquire-v5.0.0-beta.2.lua":          "node-redlock acquire (v4, v5)",
	"node-redlock/extend-v4.2.0.lua":                  "node-redlock extend (v4, v5)",
	"node-redlock/extend-v5.0.0-beta.2.lua":           "node-redlock extend (v4, v5)",
	"node-redlock/release-v4.2.0.lua":                 "node-redlock release (v4, v5)",
	"node-redlock/release-v5.0.0-beta.2.lua":          "node-redlock release (v4, v5)",
	"node-redlock/lock-v3.1.2.lua":                    "node-redlock lock (v3)",
	"redlock-rb/lock.lua":                             "redlock-rb lock",
	"redlock-rb/pttl.lua":                             "redlock-rb pttl",
	"spring-integration/obtain-5.x.lua":               "Spring obtain",
	"spring-integration/obtain-6.4.lua":               "Spring obtain",
	"spring-integration/renew-6.4.lua":                "Spring renew",
	"spring-integration/spin-unlink-unlock-6.4.lua":   "Spring spin-lock unlock (UNLINK)",
	"spring-integration/spin-delete-unlock-6.4.lua":   "Spring spin-lock unlock (DEL)",
	"spring-integration/pubsub-unlink-unlock-6.4.lua": "Spring pub/sub-lock unlock (UNLINK)",
	"spring-integration/pubsub-delete-unlock-6.4.lua": "Spring pub/sub-lock unlock (DEL)",
	"pottery/acquired.lua":                            "pottery acquired",
	"pottery/extend.lua":                              "compare-and-pexpire extend",
	"pottery/release.lua":                             "compare-and-delete release",
}

func readLibraryScript(t *testing.T, name string) []byte {
	t.Helper()
	src, err := sources.ReadFile("scripts/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestTestdataRecognised(t *testing.T) {
	files, err := fs.Glob(sources, "scripts/*/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(libraryScripts) {
		t.Errorf("%d files in scripts/, %d in libraryScripts", len(files), len(libraryScripts))
	}
	for name, want := range libraryScripts {
		s, err := Recognize(readLibraryScript(t, name))
		if err != nil || s.Name != want {
			t.Errorf("%s: Recognize = %v, %v; want %q", name, s, err, want)
		}
	}
}

// TestCatalogSources checks each entry's source is one of its libraries'
// files, and that every entry is reachable.
func TestCatalogSources(t *testing.T) {
	names := map[string]bool{}
	for _, s := range Catalog() {
		names[s.Name] = true
		if libraryScripts[s.file] != s.Name {
			t.Errorf("scripts/%s is no library file of %q", s.file, s.Name)
		}
	}
	for _, entry := range libraryScripts {
		if !names[entry] {
			t.Errorf("scripts/ names entry %q, not in the catalog", entry)
		}
	}
}

func TestVariantsRecognised(t *testing.T) {
	for src, want := range map[string]string{
		// redis.io's release as people retype it.
		"if redis.call('GET', KEYS[1]) == ARGV[1] then\n\treturn redis.call('DEL', KEYS[1])\nelse\n\treturn 0\nend\n":                "compare-and-delete release",
		"-- release the lock\nif redis.call([[get]],KEYS[1])==ARGV[1] then return redis.call(\"\\100el\",KEYS[1]) else return 0 end": "compare-and-delete release",
		// redsync's new delete, quoted differently and commented.
		"local val = redis.call('get', KEYS[1]) --[[ the holder ]]\nif val == ARGV[1] then return redis.call('del', KEYS[1])\n" +
			"elseif val == false then return -1 else return 0 end": "redsync delete (v4.12+)",
		// Spring's obtain in one line, with 0x and a long comment.
		"local lockClientId = redis.call(\"get\", KEYS[1]) if lockClientId == ARGV[1] then redis.call(\"pexpire\", KEYS[1], ARGV[2]) " +
			"return true elseif not lockClientId then redis.call(\"set\", KEYS[1], ARGV[1], 'PX', ARGV[2]) return true end --[==[x]==] return false": "Spring obtain",
		"return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])": "node-redlock lock (v3)",
	} {
		s, err := Recognize([]byte(src))
		if err != nil || s.Name != want {
			t.Errorf("Recognize(%q) = %v, %v; want %q", src, s, err, want)
		}
	}
}

func TestNearMissesRejected(t *testing.T) {
	release := string(readLibraryScript(t, "redis-io/release.lua"))
	touch := string(readLibraryScript(t, "redsync/touch.lua"))
	acquire := string(readLibraryScript(t, "node-redlock/acquire-v4.2.0.lua"))
	for name, src := range map[string]string{
		"~= for ==":        strings.Replace(release, "==", "~=", 1),
		"KEYS[2]":          strings.Replace(release, `"del",KEYS[1]`, `"del",KEYS[2]`, 1),
		"ARGV[2]":          strings.Replace(release, "ARGV[1]", "ARGV[2]", 1),
		"return 1":         strings.Replace(release, "return 0", "return 1", 1),
		"extra call":       strings.Replace(release, "else", "redis.call(\"del\", KEYS[2])\nelse", 1),
		"unlink for del":   strings.Replace(release, `"del"`, `"unlink"`, 1),
		"expire for pexp":  strings.Replace(touch, "PEXPIRE", "EXPIRE", 1),
		"== 0 for == 1":    strings.Replace(acquire, "== 1", "== 0", 1),
		"argument case":    strings.Replace(touch, "ARGV[1]", "argv[1]", 1),
		"string not name":  strings.Replace(release, "KEYS[1]", `"KEYS[1]"`, 1),
		"not lexable":      release + "\n'unterminated",
		"empty":            "",
		"redisson tryLock": redissonTryLock,
	} {
		_, err := Recognize([]byte(src))
		var unknown *UnknownError
		if !errors.As(err, &unknown) || err.Error() != unknownMsg {
			t.Errorf("%s: Recognize = %v, want an *UnknownError", name, err)
		}
	}
}

// redissonTryLock is the shape of Redisson's RedissonLock.tryLockInnerAsync
// (a hash per lock, one field per holder): out of scope, never recognised.
const redissonTryLock = `if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then ` +
	`redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; ` +
	`return redis.call('pttl', KEYS[1]);`

func TestUnknownErrorUnwrapsLexError(t *testing.T) {
	_, err := Recognize([]byte(`return "`))
	var lexErr *LexError
	if !errors.As(err, &lexErr) {
		t.Errorf("Recognize error %v does not wrap a *LexError", err)
	}
	if _, err := Recognize([]byte(`return 1`)); errors.Unwrap(err) != nil {
		t.Errorf("Recognize(return 1) wraps %v", errors.Unwrap(err))
	}
}

// TestRunOddArguments runs every script with missing or extra KEYS and ARGV:
// no panic, and any error is an ArgError.
func TestRunOddArguments(t *testing.T) {
	ctx := context.Background()
	argSets := [][][]byte{nil, {[]byte("t")}, {[]byte("t"), []byte("x"), []byte("y"), []byte("z")}}
	keySets := [][][]byte{nil, {[]byte("k")}, {[]byte("k"), []byte("k"), []byte("j")}}
	for _, s := range Catalog() {
		for _, keys := range keySets {
			for _, args := range argSets {
				_, err := s.Run(ctx, newFakeLocks(), keys, args)
				if err != nil && !errors.As(err, new(ArgError)) {
					t.Errorf("%s keys=%q args=%q: %v is not an ArgError", s.Name, keys, args, err)
				}
			}
		}
	}
}

// TestRunPassesBackendErrors: an error from Locks comes back unchanged.
func TestRunPassesBackendErrors(t *testing.T) {
	errBackend := errors.New("backend down")
	args := [][]byte{[]byte("t"), []byte("5000"), []byte("5000")}
	for _, s := range Catalog() {
		l := newFakeLocks()
		l.fail = errBackend
		_, err := s.Run(context.Background(), l, [][]byte{[]byte("k"), []byte("j")}, args)
		if !errors.Is(err, errBackend) {
			t.Errorf("%s: Run = %v, want the backend error", s.Name, err)
		}
	}
}

func TestRollbackOutlivesContext(t *testing.T) {
	acquire, err := Recognize(readLibraryScript(t, "node-redlock/acquire-v4.2.0.lua"))
	if err != nil {
		t.Fatal(err)
	}
	l := newFakeLocks()
	l.locks["b"] = fakeLock{token: "other"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := acquire.Run(ctx, l, [][]byte{[]byte("a"), []byte("b")}, [][]byte{[]byte("t"), []byte("5000")})
	if err != nil || r.Kind != Int || r.Int != 0 {
		t.Fatalf("acquire = %+v, %v; want 0", r, err)
	}
	if _, held := l.locks["a"]; held || len(l.delCtxErr) != 1 || l.delCtxErr[0] != nil {
		t.Errorf("rollback: a held %v, Del contexts %v", held, l.delCtxErr)
	}
}

func TestPubSubUnlockPublishes(t *testing.T) {
	unlock, err := Recognize(readLibraryScript(t, "spring-integration/pubsub-unlink-unlock-6.4.lua"))
	if err != nil {
		t.Fatal(err)
	}
	l := &publishingLocks{fakeLocks: newFakeLocks()}
	l.locks["lk"] = fakeLock{token: "t", ttl: time.Minute}
	r, err := unlock.Run(context.Background(), l, [][]byte{[]byte("lk")}, [][]byte{[]byte("t"), []byte("ch")})
	if err != nil || r.Kind != Int || r.Int != 1 {
		t.Fatalf("unlock = %+v, %v; want 1", r, err)
	}
	if len(l.published) != 1 || l.published[0] != [2]string{"ch", "lk"} {
		t.Errorf("published %q, want [ch lk]", l.published)
	}
}

func TestDurationCaps(t *testing.T) {
	if d := duration(1 << 62); d != maxDuration {
		t.Errorf("duration(2^62 ms) = %v", d)
	}
	if d := duration(1500); d != 1500*time.Millisecond {
		t.Errorf("duration(1500) = %v", d)
	}
}
