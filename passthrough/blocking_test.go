package passthrough

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestPutBackUndoesEachPop: for every blocking pop, in RESP2 and RESP3,
// the command restore builds from the data Redis's real reply puts the
// popped elements back, so the key holds what it held before the pop.
func TestPutBackUndoesEachPop(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: data.Addr(), Protocol: 2})
	defer rc.Close()
	r := New(Config{Addr: data.Addr(), Timeout: 10 * time.Second})
	defer r.Close()
	list := func(k string) string { return fmt.Sprint(rc.LRange(ctx, k, 0, -1).Val()) }
	zset := func(k string) string { return fmt.Sprint(rc.ZRangeWithScores(ctx, k, 0, -1).Val()) }
	cases := []struct {
		cmd  string
		args []string
		fill func(k string)
		dump func(k string) string
	}{
		{"blpop", []string{"BLPOP", "K", "0"}, func(k string) { rc.RPush(ctx, k, "a", "b", "c") }, list},
		{"brpop", []string{"BRPOP", "K", "0"}, func(k string) { rc.RPush(ctx, k, "a", "b", "c") }, list},
		{"blmpop", []string{"BLMPOP", "0", "1", "K", "LEFT", "COUNT", "2"}, func(k string) { rc.RPush(ctx, k, "a", "b", "c") }, list},
		{"blmpop", []string{"BLMPOP", "0", "1", "K", "RIGHT", "COUNT", "2"}, func(k string) { rc.RPush(ctx, k, "a", "b", "c") }, list},
		{"bzpopmin", []string{"BZPOPMIN", "K", "0"}, func(k string) {
			rc.ZAdd(ctx, k, redis.Z{Score: 1.5, Member: "x"}, redis.Z{Score: 2, Member: "y"})
		}, zset},
		{"bzpopmax", []string{"BZPOPMAX", "K", "0"}, func(k string) {
			rc.ZAdd(ctx, k, redis.Z{Score: 1.5, Member: "x"}, redis.Z{Score: 2, Member: "y"})
		}, zset},
		{"bzmpop", []string{"BZMPOP", "0", "1", "K", "MIN", "COUNT", "2"}, func(k string) {
			rc.ZAdd(ctx, k, redis.Z{Score: 1.5, Member: "x"}, redis.Z{Score: 2, Member: "y"}, redis.Z{Score: 3, Member: "z"})
		}, zset},
	}
	for i, tc := range cases {
		for _, proto := range []int{2, 3} {
			key := fmt.Sprintf("putback:%d:%d", i, proto)
			tc.fill(key)
			before := tc.dump(key)
			u, err := dial(r.cfg, proto)
			if err != nil {
				t.Fatal(err)
			}
			args := make([][]byte, len(tc.args))
			for j, a := range tc.args {
				if a == "K" {
					a = key
				}
				args[j] = []byte(a)
			}
			reply, err := u.roundTrip(args, 10*time.Second)
			u.close()
			if err != nil || tc.dump(key) == before {
				t.Fatalf("%v resp%d: %q, %v: nothing popped", tc.args, proto, reply, err)
			}
			r.putBack(proto, 1, tc.cmd, args, reply)
			if after := tc.dump(key); after != before {
				t.Errorf("%v resp%d: reply %q; before %s, after put-back %s", tc.args, proto, reply, before, after)
			}
		}
	}
	if r.stats.Failed.Load() != 0 {
		t.Errorf("%d put-backs failed", r.stats.Failed.Load())
	}
}

// TestRestoreLeavesOthersAlone: nulls, errors, moves and reads give no
// command to undo.
func TestRestoreLeavesOthersAlone(t *testing.T) {
	for _, tc := range []struct{ name, reply string }{
		{"blpop", "*-1\r\n"}, {"blpop", "_\r\n"}, {"blpop", "-ERR x\r\n"}, {"blmove", "$1\r\na\r\n"},
		{"brpoplpush", "$1\r\na\r\n"}, {"xread", "*1\r\n*2\r\n$1\r\ns\r\n*0\r\n"}, {"wait", ":0\r\n"},
		{"bzpopmin", "*2\r\n$1\r\nk\r\n$1\r\nm\r\n"},
	} {
		if cmd := restore(tc.name, nil, []byte(tc.reply)); cmd != nil {
			t.Errorf("restore(%s, %q) = %q, want nothing", tc.name, tc.reply, cmd)
		}
	}
}
