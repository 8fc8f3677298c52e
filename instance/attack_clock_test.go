package instance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/instance"
)

// TestAttackJumpSeenByLateReply: a lease held on exactly two of three
// nodes (node 2 lost it). Node 0's link delays 30 ms (a short window for the probes to cross);
// a LOCK of another key is granted by nodes 1 and 2 while its acquire is
// still on its way to node 0, whose clock then steps +10 s (Redis drops
// the lease there). That acquire's pipeline is the first to show the
// jump, and its reply comes after the LOCK was decided: nobody in the
// fan-out reads it. The jump must still hold node 0 out: another client is
// refused the key while the lease's validity runs. (Were the health probe
// the first to show the jump, the run would prove nothing; without the
// fix it failed in every run.) This instance believes node 2 holds the
// lease (it took it; the test deletes it behind its back), so the holder
// is rightly not told.
func TestAttackJumpSeenByLateReply(t *testing.T) {
	nodes, clock, cfg := clockNodes(t)
	link := linked(t, &cfg, nodes, 0)
	in, err := instance.Start(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Shutdown(t.Context()) })
	c := newClient(t, in.Addr(), 2)
	infoNodes := func() string { return c.Do(t.Context(), "INFO", "nodes").String() }
	eventually(t, 20*time.Second, "every node counted", func() bool { return strings.Contains(infoNodes(), "status:ok") })
	warm(t, c)

	key := uniqueKey(t)
	holder := dialRESP3(t, in.Addr())
	start := time.Now()
	g := parseGrant(t, holder.do("LOCK", key, "PX", "5000", "TOKEN", "tok"))
	// Node 2 lost the lease (as if it had missed the grant).
	raw2 := redis.NewClient(&redis.Options{Addr: nodes[2].Addr()})
	defer raw2.Close()
	if err := raw2.Del(t.Context(), key, "lockproxy:meta:"+key).Err(); err != nil {
		t.Fatal(err)
	}
	link.SetDelay(30 * time.Millisecond)
	// Granted by nodes 1 and 2; node 0's acquire is in the link.
	mustLock(t, c, uniqueKey(t)+":other", "PX", 5000)
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond) // node 0's late reply arrives
	link.SetDelay(0)
	r, err := c.Do(t.Context(), "LOCK", key, "PX", "5000", "TOKEN", "tok2").Result()
	if err == nil && time.Since(start) < time.Duration(g.validity)*time.Millisecond {
		t.Fatalf("another client granted %s (%v) %v into the lease's validity %d ms (fence %d); INFO nodes:\n%s",
			key, r, time.Since(start), g.validity, g.fence, infoNodes())
	}
	if s := infoNodes(); !strings.Contains(s, "nodes_held_out:1\r\n") || !strings.Contains(s, ",state=not_counted,error=node clock jumped +") {
		t.Fatalf("node 0 not held out after its jump:\n%s", s)
	}
}
