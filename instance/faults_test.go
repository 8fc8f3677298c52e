package instance_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// pause SIGSTOPs a node and makes sure it runs again when the test ends.
func pause(t *testing.T, s *redistest.Server) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
}

func resume(t *testing.T, s *redistest.Server) {
	t.Helper()
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
}

// lockHolder is the token that holds key on node s, "" if none.
func lockHolder(t *testing.T, s *redistest.Server, key string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	tok, err := c.Get(context.Background(), key).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return tok
}

// exclusive checks, on key, what a fenced resource needs: while one client
// holds it no other is granted it, and each grant's fence is above the one
// before (after).
func exclusive(t *testing.T, a, b *redis.Client, key string, after int64) {
	t.Helper()
	last := after
	for i := range 3 {
		holder, other := a, b
		if i%2 == 1 {
			holder, other = b, a
		}
		g := mustLock(t, holder, key, "PX", 60000)
		if g.fence <= last {
			t.Fatalf("fence %d after %d: it went back", g.fence, last)
		}
		last = g.fence
		if _, ok, err := lock(context.Background(), other, key, "PX", 60000); ok || err != nil {
			t.Fatalf("double grant: a second client got %s while it was held (err %v)", key, err)
		}
		if n, err := holder.Do(context.Background(), "UNLOCK", key, g.token).Int(); n != 1 || err != nil {
			t.Fatalf("UNLOCK: %v %v", n, err)
		}
	}
}

// TestRefusedLockFreeAfterPause (issue 12.1): SET NX while 2 of 3 nodes
// are SIGSTOPped is refused; once they resume, the acquires they ran late
// are undone and another client gets the key, long before its 60 s TTL
// could have freed it, and no node keeps the refused token.
func TestRefusedLockFreeAfterPause(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	c, d := newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	ctx := context.Background()
	pause(t, nodes[1])
	pause(t, nodes[2])
	err := c.Do(ctx, "SET", key, "tokA", "NX", "PX", 60000).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("SET NX with 2 of 3 nodes paused: %v, want NOQUORUM", err)
	}
	resume(t, nodes[1])
	resume(t, nodes[2])
	eventually(t, 20*time.Second, "another client gets the key after the nodes resume", func() bool {
		ok, err := d.SetNX(ctx, key, "tokB", 60*time.Second).Result()
		if err != nil {
			t.Logf("SET NX: %v", err)
		}
		return ok
	})
	// Long before the 60 s TTL: a node whose undo is still on its way
	// when the others granted tokB gets it a moment later.
	for i, s := range nodes {
		eventually(t, 10*time.Second, "node "+strconv.Itoa(i)+" no longer holds the refused token", func() bool {
			return lockHolder(t, s, key) != "tokA"
		})
	}
	if n, err := d.Del(ctx, key).Result(); n != 1 || err != nil {
		t.Fatalf("DEL: %v %v", n, err)
	}
	exclusive(t, c, d, key, 0)
}

// TestUndecidedUnlockAndRenewSayUnknown (issue 12.2): the lock held on 2 of
// 3 nodes, one of those SIGSTOPped. RENEW and UNLOCK cannot know whether
// the token holds a majority: they say the outcome is unknown, not
// null/0; once the node resumes, the release reaches it.
func TestUndecidedUnlockAndRenewSayUnknown(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	c, d := newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	ctx := context.Background()
	g := mustLock(t, c, key, "PX", 60000)
	eventually(t, 20*time.Second, "held on every node", func() bool {
		for _, s := range nodes {
			if lockHolder(t, s, key) != g.token {
				return false
			}
		}
		return true
	})
	raw := redis.NewClient(&redis.Options{Addr: nodes[2].Addr(), MaxRetries: -1})
	defer raw.Close()
	if err := raw.Del(ctx, key).Err(); err != nil { // as a racing release would leave it
		t.Fatal(err)
	}
	pause(t, nodes[1])
	unknown := func(cmd ...any) {
		t.Helper()
		err := c.Do(ctx, cmd...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "TIMEOUT outcome unknown") {
			t.Fatalf("%v with the holder's second node paused: %v, want TIMEOUT outcome unknown", cmd[0], err)
		}
	}
	unknown("RENEW", key, g.token, "PX", 60000)
	if _, ok, err := lock(ctx, d, key, "PX", 60000); ok { // nodes 0 and 1 may hold it: not free
		t.Fatalf("LOCK while the holder may hold a majority: granted (err %v)", err)
	}
	unknown("UNLOCK", key, g.token)
	resume(t, nodes[1])
	eventually(t, 20*time.Second, "the release reaches the resumed node", func() bool {
		return lockHolder(t, nodes[1], key) == ""
	})
	exclusive(t, c, d, key, g.fence)
}
