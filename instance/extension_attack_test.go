package instance_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestAttackExtensionLandsAfterRelease: a renewal's extension, held on its
// link to node 2, lands there after the holder's release and another
// token's grant and release. It must not heal node 2: with node 1, which
// the release missed, the released holder would hold a majority again with
// its old fence, below the other grant's.
//
// a is granted through A on every node (fence g). B's link to node 2 is
// cut (blackholed: what B sends is held) and a's RENEW through B is
// granted by nodes 0 and 1 (B's node timeout is 10 s, so the renewal still
// hears node 2's late answer). a is released through C, whose link to
// node 1 is cut for good (nodes 0 and 2 delete it); b is granted through C
// by nodes 0 and 2 (above g) and released. Then B's link comes back: the
// extension lands on node 2, where the key is free and b's meta is left
// beside it (a release deletes the key alone), and answers that a does
// not hold it. Without that, it answered "free", B healed node 2 for a
// with fence g, LOCKINFO through D showed a, and a's LOCK … TOKEN
// through D answered g after b's grant.
func TestAttackExtensionLandsAfterRelease(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfgA, cfgB, cfgC, cfgD := testConfig(nodes), testConfig(nodes), testConfig(nodes), testConfig(nodes)
	cutB2 := linked(t, &cfgB, nodes, 2)
	cfgB.Redlock.NodeTimeoutMS = 10000 // the renewal hears node 2's late answer
	cfgB.Redlock.Pipelines = 8         // the extension goes out at once, not behind a probe held on the link
	cutC1 := linked(t, &cfgC, nodes, 1)
	slowD0 := linked(t, &cfgD, nodes, 0)
	inA, inB, inC, inD := startInstance(t, cfgA), startInstance(t, cfgB), startInstance(t, cfgC), startInstance(t, cfgD)
	cA, cB, cC, cD := newClient(t, inA.Addr(), 2), newClient(t, inB.Addr(), 2), newClient(t, inC.Addr(), 2), newClient(t, inD.Addr(), 2)
	warm(t, cA, cB, cC, cD)
	warmHeal(t, cB, nodes)
	key, token := uniqueKey(t), "extension-lands-after-release"
	calls := watchScripts(t, nodes[2], key)
	g := mustLock(t, cA, key, "PX", 30000, "TOKEN", token)
	eventually(t, 10*time.Second, "a on every node", func() bool {
		for _, s := range nodes {
			if lockHolder(t, s, key) != token {
				return false
			}
		}
		return true
	})
	cutB2.SetBlackhole(true)
	if v, err := cB.Do(t.Context(), "RENEW", key, token, "PX", 30000).Int64(); err != nil || v <= 0 {
		t.Fatalf("RENEW: %v %v", v, err)
	}
	cutC1.SetBlackhole(true) // until the test ends
	if n, err := cC.Do(t.Context(), "UNLOCK", key, token).Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK a: %v %v", n, err)
	}
	b := mustLock(t, cC, key, "PX", 30000)
	if n, err := cC.Do(t.Context(), "UNLOCK", key, b.token).Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK b: %v %v", n, err)
	}
	if extends(calls) != 0 {
		t.Fatal("the interleaving was not forced: the extension reached node 2 before b's release")
	}
	cutB2.SetBlackhole(false)
	waitCalls(t, "the extension on node 2", 1, []*scriptCalls{calls}, extends)
	// A heal decided from the extension's answer goes out as soon as B
	// reads it, across the same link: give it a few seconds to land.
	deadline := time.Now().Add(3 * time.Second)
	for heals(calls) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := heals(calls); n != 0 || lockHolder(t, nodes[2], key) == token {
		t.Errorf("the extension that landed after a's release healed node 2 (%d heals, holder %q) after b's grant (fence %d)",
			n, lockHolder(t, nodes[2], key), b.fence)
	}
	if v, err := cD.Do(t.Context(), "LOCKINFO", key).Slice(); err != redis.Nil {
		t.Errorf("LOCKINFO after a's release and b's: %v %v, want the key free (null)", v, err)
	}
	slowD0.SetDelay(300 * time.Millisecond)
	again := mustLock(t, cD, key, "PX", 30000, "TOKEN", token)
	if again.fence <= b.fence {
		t.Fatalf("a's LOCK after b's grant (fence %d) answered fence %d (a's first grant: %d)", b.fence, again.fence, g.fence)
	}
}
