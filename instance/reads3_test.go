package instance_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// readFrameSteps read, with connection a, the keys readState and
// readScores write (K:h hash, K:l list, K:z and K:f sorted sets, K:s set,
// K:str string), frame by frame. Under RESP3 Redis 7.0 replies HGETALL
// with a map, SMEMBERS with a set, scores as doubles and ZRANGE …
// WITHSCORES as [member, score] pairs, where a script gets flat arrays
// and strings.
var readFrameSteps = []string{
	"a 1: HGETALL K:h", "a 1: HGETALL K:none", "a 1: HGETALL K:str",
	"a 1: HGET K:h id:1", "a 1: HGET K:h nope", "a 1: HMGET K:h mode x", "a 1: HKEYS K:h", "a 1: HVALS K:h",
	"a 1: HLEN K:h", "a 1: HEXISTS K:h mode", "a 1: HSTRLEN K:h mode",
	"a 1: LRANGE K:l 0 -1", "a 1: LINDEX K:l 9",
	"a 1: ZRANGE K:z 0 -1", "a 1: ZRANGE K:z 0 -1 WITHSCORES", "a 1: ZRANGE K:z 0 -1 withscores REV",
	"a 1: ZRANGE K:z (1 +inf BYSCORE WITHSCORES", "a 1: ZRANGE K:none 0 -1 WITHSCORES",
	"a 1: ZRANGE K:z 0 -1 LIMIT 0 1 WITHSCORES", "a 1: ZRANGE K:f 0 -1 WITHSCORES",
	"a 1: ZSCORE K:z y", "a 1: ZSCORE K:z w", "a 1: ZSCORE K:z nope", "a 1: ZSCORE K:f a", "a 1: ZSCORE K:str a",
	"a 1: ZMSCORE K:z x nope w", "a 1: ZMSCORE K:none x",
	"a 1: ZRANK K:z y", "a 1: ZRANK K:z nope", "a 1: ZRANK K:z y WITHSCORE", "a 1: ZREVRANK K:z y WITHSCORE", "a 1: ZREVRANK K:z y", "a 1: ZCARD K:z", "a 1: ZCOUNT K:z -inf +inf",
	"a 1: SCARD K:s", "a 1: SISMEMBER K:s m", "a 1: SMEMBERS K:s", "a 1: SMEMBERS K:none", "a 1: SMEMBERS K:str",
	"a 1: SMISMEMBER K:s m q", "a 1: STRLEN K:str", "a 1: GETRANGE K:str 0 1",
}

// readScores writes sorted sets with scores that print differently.
const readScores = `
redis.call('ZADD', KEYS[1], 1, 'x', 2.5, 'y', 'inf', 'w')
redis.call('ZADD', KEYS[2], 0.1, 'a', '-inf', 'b')
return 1`

// TestReadCommandsFramesMatchRedis runs readFrameSteps on a plain
// redis-server and on lockproxy over three nodes, in RESP2 and RESP3, and
// compares every frame byte for byte.
func TestReadCommandsFramesMatchRedis(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			var want []string
			scriptTargets(t, nil, func(t *testing.T, addr string, _ []*redistest.Server) {
				ctx := compatCtx(t)
				c := newClient(t, addr, 2)
				base := uniqueKey(t) // no reply names a key
				if err := c.Eval(ctx, readState, []string{base + ":h", base + ":l", base + ":z0", base + ":s", base + ":str"}).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.Eval(ctx, readScores, []string{base + ":z", base + ":f"}).Err(); err != nil {
					t.Fatal(err)
				}
				got := runSteps(t, addr, proto, base, readFrameSteps)
				if want == nil { // the plain redis-server runs first
					want = got
					if testing.Verbose() {
						t.Logf("redis:\n%s", strings.Join(want, "\n"))
					}
					return
				}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("frame %d: lockproxy %q, redis %q", i, got[i], want[i])
					}
				}
			})
		})
	}
}
