package instance_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/instance"
)

// python-redis-lock 4.0's release script, byte for byte
// (ionelmc/python-redis-lock, src/redis_lock/__init__.py). Neither it nor
// pottery is in Debian, and PyPI is out of reach, so the test sends what
// they send: SET NX, then their scripts by EVAL. pottery 3's scripts are
// the catalogue's own copies (luascript/scripts/pottery, see SOURCES.md).
const (
	pyRedisLockUnlock = `
    if redis.call("get", KEYS[1]) ~= ARGV[1] then
        return 1
    else
        redis.call("del", KEYS[2])
        redis.call("lpush", KEYS[2], 1)
        redis.call("pexpire", KEYS[2], ARGV[2])
        redis.call("del", KEYS[1])
        return 0
    end
`
)

// TestCompatPythonScriptLibraries checks the compatibility table's row for
// pottery and python-redis-lock on each backend. pottery's scripts are in
// the catalog, so it works on both. python-redis-lock releases with a
// script outside the catalog, which runs on every node on redlock and is
// refused on ZooKeeper with an error that names redlock; its lock then
// stays until its TTL.
func TestCompatPythonScriptLibraries(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		potteryAcquired, potteryExtend, potteryRelease := potteryScript(t, "acquired"), potteryScript(t, "extend"), potteryScript(t, "release")
		in := startInstance(t, cfg)
		c := dialRaw(t, in.Addr())
		want := func(what, got, w string) {
			t.Helper()
			if got != w {
				t.Errorf("%s: %q, want %q", what, got, w)
			}
		}
		positive := func(what, got string) {
			t.Helper()
			if n, err := strconv.Atoi(strings.TrimPrefix(got, ":")); err != nil || !strings.HasPrefix(got, ":") || n <= 0 {
				t.Errorf("%s: %q, want a positive integer", what, got)
			}
		}

		want("pottery SET NX PX", c.do("SET", "redlock:b", "tok", "NX", "PX", "30000"), "+OK")
		positive("pottery acquired (held)", c.do("EVAL", potteryAcquired, "1", "redlock:b", "tok"))
		want("pottery acquired (another token)", c.do("EVAL", potteryAcquired, "1", "redlock:b", "other"), ":0")
		want("pottery extend", c.do("EVAL", potteryExtend, "1", "redlock:b", "tok", "20000"), ":1")
		want("pottery release", c.do("EVAL", potteryRelease, "1", "redlock:b", "tok"), ":1")
		want("pottery acquired (free)", c.do("EVAL", potteryAcquired, "1", "redlock:b", "tok"), ":0")
		want("PTTL after pottery's release", c.do("PTTL", "redlock:b"), ":-2")

		want("python-redis-lock SET NX EX", c.do("SET", "lock:a", "tok", "NX", "EX", "30"), "+OK")
		unlock := c.do("EVAL", pyRedisLockUnlock, "2", "lock:a", "lock-signal:a", "tok", "1000")
		if cfg.BackendName() == "zookeeper" {
			if !strings.HasPrefix(unlock, "-ERR ") || !strings.Contains(unlock, "redlock") {
				t.Errorf("python-redis-lock release on ZooKeeper: %q, want an error naming the redlock backend", unlock)
			}
			positive("PTTL after the refused release (held until its TTL)", c.do("PTTL", "lock:a"))
		} else {
			want("python-redis-lock release", unlock, ":0")
			want("PTTL after python-redis-lock's release", c.do("PTTL", "lock:a"), ":-2")
		}
		want("PING after", c.do("PING"), "+PONG")
	})
}

// potteryScript is pottery's script name, as the catalogue keeps it.
func potteryScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../luascript/scripts/pottery/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
