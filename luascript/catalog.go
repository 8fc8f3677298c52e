package luascript

import (
	"context"
	"embed"
	"fmt"
)

// Script is a known lock script.
type Script struct {
	Name    string // what the script does, e.g. "redsync delete (v4.12+)"
	Library string // the libraries and versions that send it

	file string  // its canonical source: one library's exact bytes, in scripts/<library>/
	run  runFunc // its lock operation
}

// Run performs the script's lock operation and returns the reply Redis would
// give to EVAL of the script; keys and args are EVAL's KEYS and ARGV.
//
// Errors from l are returned unchanged. An ArgError is returned where Redis
// would fail the script on these arguments (a missing KEYS[1], a non-integer
// TTL, ...). The Reply is the zero Reply when the error is not nil.
func (s *Script) Run(ctx context.Context, l Locks, keys, args [][]byte) (Reply, error) {
	return s.run(ctx, &call{l: l, keys: toStrings(keys), args: toStrings(args)})
}

func toStrings(bs [][]byte) []string {
	ss := make([]string, len(bs))
	for i, b := range bs {
		ss[i] = string(b)
	}
	return ss
}

//go:embed scripts/*/*.lua
var sources embed.FS

// Library names, as docs/lock-scripts.md spells them.
const (
	libRedsync   = "github.com/go-redsync/redsync/v4"
	libRedislock = "github.com/bsm/redislock"
	libRedisPy   = "redis-py (redis.lock.Lock)"
	libRedlockJS = "redlock (npm, node-redlock)"
	libIoredis   = "ioredis-lock (npm)"
	libRedlockRb = "redlock-rb (gem redlock)"
	libSpring    = "Spring Integration RedisLockRegistry"
	libPottery   = "pottery (Redlock)"
)

// catalog is every known script. Scripts whose sources normalise alike are
// one entry, listing all their libraries.
var catalog = []*Script{
	{Name: "compare-and-delete release", file: "redis-io/release.lua", run: compareDel(reply1, reply0),
		Library: "redis.io distributed-locks page; Laravel Illuminate/Cache/LuaScripts.php releaseLock; " +
			libRedlockRb + " unlock; " + libRedsync + " v4.0.3–v4.11 delete; " + libRedislock +
			" v0.9 release; " + libRedlockJS + " v3 unlock; " + libPottery + " 3 release"},
	{Name: "compare-and-pexpire extend", file: "redsync/touch.lua", run: compareExpire(reply1, reply0),
		Library: libRedsync + " touch (all v4); " + libRedislock + " v0.9 refresh; " + libRedlockJS + " v3 extend; " + libPottery + " 3 extend"},
	{Name: "ioredis-lock delifequal", Library: libIoredis + " v4", file: "ioredis-lock/delifequal.lua",
		run: compareDel(reply1, reply0)},
	{Name: "ioredis-lock pexpireifequal", Library: libIoredis + " v4", file: "ioredis-lock/pexpireifequal.lua",
		run: compareExpire(reply1, reply0)},
	{Name: "redsync delete (v4.12+)", Library: libRedsync + " v4.12+", file: "redsync/delete-v4.12.0.lua",
		run: redsyncDelete},
	{Name: "redsync touch with SET NX (v4.12+)", Library: libRedsync + " v4.12+", file: "redsync/touch-with-setnx-v4.12.0.lua",
		run: redsyncTouchWithSetNX},
	{Name: "redislock obtain (v0.9.4)", Library: libRedislock + " v0.9.4", file: "redislock/obtain-v0.9.4.lua",
		run: redislockObtain},
	{Name: "redislock pttl (v0.9)", Library: libRedislock + " v0.9", file: "redislock/pttl-v0.9.lua",
		run: redislockPTTL},
	{Name: "redislock obtain (v0.10)", Library: libRedislock + " v0.10", file: "redislock/obtain-v0.10.0.lua",
		run: redislockObtainMulti},
	{Name: "redislock release (v0.10)", Library: libRedislock + " v0.10", file: "redislock/release-v0.10.0.lua",
		run: redislockRelease},
	{Name: "redislock refresh (v0.10)", Library: libRedislock + " v0.10", file: "redislock/refresh-v0.10.0.lua",
		run: redislockRefresh},
	{Name: "redislock pttl (v0.10)", Library: libRedislock + " v0.10", file: "redislock/pttl-v0.10.0.lua",
		run: redislockPTTLMulti},
	{Name: "redis-py Lock release", Library: libRedisPy, file: "redis-py/release.lua",
		run: compareDel(reply1, reply0)},
	{Name: "redis-py Lock extend", Library: libRedisPy, file: "redis-py/extend.lua", run: redisPyExtend},
	{Name: "redis-py Lock reacquire", Library: libRedisPy, file: "redis-py/reacquire.lua",
		run: compareExpire(reply1, reply0)},
	{Name: "node-redlock acquire (v4, v5)", Library: libRedlockJS + " v4, v5", file: "node-redlock/acquire-v5.0.0-beta.2.lua",
		run: redlockAcquire},
	{Name: "node-redlock extend (v4, v5)", Library: libRedlockJS + " v4, v5", file: "node-redlock/extend-v5.0.0-beta.2.lua",
		run: redlockExtend},
	{Name: "node-redlock release (v4, v5)", Library: libRedlockJS + " v4, v5", file: "node-redlock/release-v5.0.0-beta.2.lua",
		run: redlockRelease},
	{Name: "node-redlock lock (v3)", Library: libRedlockJS + " v3", file: "node-redlock/lock-v3.1.2.lua", run: setNXPX},
	{Name: "redlock-rb lock", Library: libRedlockRb, file: "redlock-rb/lock.lua", run: redlockRbLock},
	{Name: "redlock-rb pttl", Library: libRedlockRb, file: "redlock-rb/pttl.lua", run: redlockRbPTTL},
	{Name: "pottery acquired", Library: libPottery + " 3", file: "pottery/acquired.lua", run: potteryAcquired},
	{Name: "Spring obtain", Library: libSpring + " 5.x–7.0", file: "spring-integration/obtain-6.4.lua", run: springObtain},
	{Name: "Spring renew", Library: libSpring + " 6.x–7.0", file: "spring-integration/renew-6.4.lua",
		run: compareExpire(reply1, replyNull)},
	{Name: "Spring spin-lock unlock (UNLINK)", Library: libSpring + " 6.x–7.0", file: "spring-integration/spin-unlink-unlock-6.4.lua",
		run: compareDel(reply1, replyNull)},
	{Name: "Spring spin-lock unlock (DEL)", Library: libSpring + " 6.x", file: "spring-integration/spin-delete-unlock-6.4.lua",
		run: compareDel(reply1, replyNull)},
	{Name: "Spring pub/sub-lock unlock (UNLINK)", Library: libSpring + " 6.x–7.0",
		file: "spring-integration/pubsub-unlink-unlock-6.4.lua", run: springPubSubUnlock},
	{Name: "Spring pub/sub-lock unlock (DEL)", Library: libSpring + " 6.x", file: "spring-integration/pubsub-delete-unlock-6.4.lua",
		run: springPubSubUnlock},
}

// byForm maps each catalog entry's normalised source to the entry.
var byForm = indexCatalog()

// indexCatalog normalises every entry's source. A source that does not
// normalise, or two entries that normalise alike, are bugs in the catalog.
func indexCatalog() map[string]*Script {
	m := make(map[string]*Script, len(catalog))
	for _, s := range catalog {
		src, err := sources.ReadFile("scripts/" + s.file)
		if err != nil {
			panic(err)
		}
		form, err := Normalize(src)
		if err != nil {
			panic(fmt.Sprintf("luascript: %s: %v", s.file, err))
		}
		if other := m[form]; other != nil {
			panic(fmt.Sprintf("luascript: %s and %s normalise alike", s.file, other.file))
		}
		m[form] = s
	}
	return m
}

// Recognize returns the known script src is, or an *UnknownError.
func Recognize(src []byte) (*Script, error) {
	form, err := Normalize(src)
	if err != nil {
		return nil, &UnknownError{err: err}
	}
	if s := byForm[form]; s != nil {
		return s, nil
	}
	return nil, &UnknownError{}
}
