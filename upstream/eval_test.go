package upstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/quorum"
)

func admitted(t *testing.T, src string) *luascript.Admitted {
	t.Helper()
	a, err := luascript.Admit([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// evalOn runs s on n without a turn (guardedOn with no token).
func evalOn(ctx context.Context, n *RedisNode, s *luascript.Admitted, keys, args []string) quorum.Reply {
	return guardedOn(ctx, n, s, keys, args, "")
}

// TestEvalOnNode: a script outside the catalog runs on the node with the
// client's keys unprefixed (EVAL the first time, the node not having it),
// and its replies — values, nil, arrays, its errors — come back as values.
func TestEvalOnNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n := newNode(t, RedisOptions{Addr: addr})
		raw := rawClient(t, addr)
		raw.Set(ctx, "k", "tok", time.Minute)
		pttl := admitted(t, `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PTTL', KEYS[1]) end return -3`)
		r := evalOn(ctx, n, pttl, []string{"k"}, []string{"tok"})
		if r.Err != nil || r.Value.Kind != luascript.Int || r.Value.Int <= 50000 || r.Value.Int > 60000 {
			t.Fatalf("pttl: %+v", r)
		}
		if r = evalOn(ctx, n, pttl, []string{"k"}, []string{"other"}); r.Err != nil || r.Value.Int != -3 {
			t.Fatalf("pttl, other token: %+v", r)
		}
		mixed := admitted(t, `return {redis.call('GET', KEYS[1]), 7, false, redis.pcall('INCR', KEYS[1])}`)
		r = evalOn(ctx, n, mixed, []string{"k"}, nil)
		a := r.Value.Array
		if r.Err != nil || len(a) != 4 || a[0].Str != "tok" || a[1].Int != 7 || a[2].Kind != luascript.Null ||
			a[3].Kind != luascript.Error || a[3].Str != "ERR value is not an integer or out of range" {
			t.Fatalf("mixed: %+v", r)
		}
		null := admitted(t, `return redis.call('GET', KEYS[1])`)
		if r = evalOn(ctx, n, null, []string{"missing"}, nil); r.Err != nil || r.Value.Kind != luascript.Null {
			t.Fatalf("nil: %+v", r)
		}
		raw.HSet(ctx, "h", "f", "v")
		if r = evalOn(ctx, n, null, []string{"h"}, nil); r.Err != nil || r.Value.Kind != luascript.Error || !strings.Contains(r.Value.Str, "WRONGTYPE") {
			t.Fatalf("wrong type: %+v", r)
		}
	})
}

// TestEvalKillsRunawayScript: a script that never returns holds up the
// node; OpKill, on a connection of its own, ends it, and the node answers
// lockproxy's calls again.
func TestEvalKillsRunawayScript(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t)
	n := newNode(t, RedisOptions{Addr: srv.Addr()})
	loop := admitted(t, `while true do end`)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if r := evalOn(short, n, loop, nil, nil); r.Err == nil {
		t.Fatalf("a script that never returns answered: %+v", r)
	}
	done := make(quorum.Replies, 1)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpKill}, 0, done)
	if r := <-done; r.Err != nil || !r.OK {
		t.Fatalf("SCRIPT KILL: %+v", r)
	}
	eventually(t, 5*time.Second, "the node answers again", func() bool {
		_, _, err := n.Inspect(ctx, "k")
		return err == nil
	})
	if err := rawClient(t, srv.Addr()).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the kill: %v", err)
	}
}
