package instance_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// Attacks on the raise-only fence design (a recorded fence is only ever
// raised; a LOCK … TOKEN retry and LOCKINFO answer the fence a majority of
// the nodes record), on three real redis-servers, with instances whose
// links to some nodes delay or cut.

// TestAttackRaiseRetryBeforeTheLateTake: instance 1 reaches node 2 through
// a link that delays 1 s, and node 2's counter runs far ahead. A LOCK …
// TOKEN through instance 1 is granted by nodes 0 and 1 (they agree); its
// acquire to node 2 is still on the link when the client retries through
// instance 2, whose link to node 1 delays 300 ms: the retry's first
// majority is node 0 (it holds the grant) and node 2, where the key is
// still free and the retry takes it with node 2's counter. A majority of
// the nodes (0 and 1) records the grant's fence: the retry must answer it
// (PRODUCT.md: "succeeds again with the same fencing token"), and LOCKINFO
// too, once the grant's late acquire has landed on node 2.
func TestAttackRaiseRetryBeforeTheLateTake(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg1, cfg2 := testConfig(nodes), testConfig(nodes)
	slow2 := linked(t, &cfg1, nodes, 2)
	slow1 := linked(t, &cfg2, nodes, 1)
	in1, in2 := startInstance(t, cfg1), startInstance(t, cfg2)
	c1, c2 := newClient(t, in1.Addr(), 2), newClient(t, in2.Addr(), 2)
	warm(t, c1, c2)
	raw := redis.NewClient(&redis.Options{Addr: nodes[2].Addr()})
	defer raw.Close()
	if err := raw.IncrBy(t.Context(), "lockproxy:layout", 1000).Err(); err != nil {
		t.Fatal(err)
	}
	slow2.SetDelay(time.Second)
	slow1.SetDelay(300 * time.Millisecond)
	key, token := uniqueKey(t), "raise-retry-before-late-take"
	g := mustLock(t, c1, key, "PX", 30000, "TOKEN", token)
	again := mustLock(t, c2, key, "PX", 30000, "TOKEN", token)
	if lockHolder(t, nodes[2], key) != token {
		t.Fatal("the retry did not take node 2")
	}
	if again.fence != g.fence {
		t.Fatalf("retry answered fence %d, the grant's was %d", again.fence, g.fence)
	}
	time.Sleep(2500 * time.Millisecond) // the grant's acquire lands on node 2 (a refresh)
	slow1.SetDelay(0)
	slow2.SetDelay(0)
	if f := lockInfoFence(t, c2, key); f != g.fence {
		t.Fatalf("LOCKINFO fence %d, want the grant's %d", f, g.fence)
	}
}

// TestAttackRaiseBareMajorityLockInfo: the grant (a 3 s lease) is agreed on
// nodes 0 and 1 through instance 1, whose link to node 2 delays 1 s; node
// 2, whose counter runs far ahead, takes the key for the grant late and
// keeps its own, higher fence. LOCKINFO through instance 2, whose link to
// node 1 is cut, hears nodes 0 and 2 only, which disagree: it shows the
// larger fence. The holder goes away; once its leases ran out, b is granted
// through instance 1 by nodes 0 and 1 first. b's fence must be above every
// fence shown for the grant before it.
func TestAttackRaiseBareMajorityLockInfo(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg1, cfg2 := testConfig(nodes), testConfig(nodes)
	slow2 := linked(t, &cfg1, nodes, 2)
	cut1 := linked(t, &cfg2, nodes, 1)
	in1, in2 := startInstance(t, cfg1), startInstance(t, cfg2)
	c1, c2 := newClient(t, in1.Addr(), 2), newClient(t, in2.Addr(), 2)
	warm(t, c1, c2)
	raw := redis.NewClient(&redis.Options{Addr: nodes[2].Addr()})
	defer raw.Close()
	if err := raw.IncrBy(t.Context(), "lockproxy:layout", 1000).Err(); err != nil {
		t.Fatal(err)
	}
	slow2.SetDelay(time.Second)
	key, token := uniqueKey(t), "raise-bare-majority-lockinfo"
	g := mustLock(t, c1, key, "PX", 3000, "TOKEN", token)
	eventually(t, 10*time.Second, "node 2 takes the key late", func() bool { return lockHolder(t, nodes[2], key) == token })
	cut1.SetBlackhole(true)
	shown := lockInfoFence(t, c2, key)
	cut1.SetBlackhole(false)
	if shown < g.fence {
		t.Fatalf("LOCKINFO fence %d, below the grant's %d", shown, g.fence)
	}
	eventually(t, 20*time.Second, "the grant's leases run out", func() bool {
		for _, s := range nodes {
			if lockHolder(t, s, key) != "" {
				return false
			}
		}
		return true
	})
	b := mustLock(t, c1, key, "PX", 30000)
	if b.fence <= shown {
		t.Fatalf("b's grant (fence %d) after LOCKINFO showed %d for the grant before it (its own fence %d)", b.fence, shown, g.fence)
	}
}
