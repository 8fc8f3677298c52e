package instance_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/instance"
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
	st := aheadStage(t, nil)
	nodes, c1, c2, slow2, slow1 := st.nodes, st.c1, st.c2, st.link12, st.link21
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
	st := aheadStage(t, nil)
	nodes, c1, c2, slow2, cut1 := st.nodes, st.c1, st.c2, st.link12, st.link21
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

// TestAttackRaiseRetryWithAPausedNode: node 2 took the grant late and keeps
// its higher fence; node 1 is paused (SIGSTOP). A retry hears nodes 0 and 2,
// which disagree, waits for node 1 until the node timeout, and answers
// (no error, no refusal) the larger fence, which it commits: the
// documented bare-majority case. From then on LOCKINFO and another retry,
// once node 1 runs again, answer that fence, and the next grant is above it.
func TestAttackRaiseRetryWithAPausedNode(t *testing.T) {
	st := aheadStage(t, func(cfg *instance.Config) { cfg.Redlock.NodeTimeoutMS = 500 })
	nodes, c1, c2, slow2 := st.nodes, st.c1, st.c2, st.link12
	slow2.SetDelay(time.Second)
	key, token := uniqueKey(t), "raise-retry-paused"
	g := mustLock(t, c1, key, "PX", 30000, "TOKEN", token)
	eventually(t, 10*time.Second, "node 2 takes the key late", func() bool { return lockHolder(t, nodes[2], key) == token })
	slow2.SetDelay(0)
	pause(t, nodes[1])
	start := time.Now()
	again := mustLock(t, c2, key, "PX", 30000, "TOKEN", token)
	took := time.Since(start)
	if again.fence <= g.fence {
		t.Fatalf("bare-majority retry answered %d, want node 2's larger fence (the grant's: %d)", again.fence, g.fence)
	}
	if took > 15*time.Second {
		t.Fatalf("the retry took %v with a node timeout of 500 ms", took)
	}
	if f := lockInfoFence(t, c2, key); f != again.fence {
		t.Fatalf("LOCKINFO with node 1 paused: %d, want the retry's %d", f, again.fence)
	}
	resume(t, nodes[1])
	if r := mustLock(t, c1, key, "PX", 30000, "TOKEN", token); r.fence != again.fence {
		t.Fatalf("retry with every node: %d, want %d, the fence last answered", r.fence, again.fence)
	}
	if f := lockInfoFence(t, c1, key); f != again.fence {
		t.Fatalf("LOCKINFO with every node: %d, want %d", f, again.fence)
	}
	if n, err := c1.Do(t.Context(), "UNLOCK", key, token).Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK: %v %v", n, err)
	}
	if b := mustLock(t, c1, key, "PX", 30000); b.fence <= again.fence {
		t.Fatalf("next grant %d, not above %d", b.fence, again.fence)
	}
}

// TestAttackRaiseHealAfterAnotherGrant: a renewal's heal, decided while the
// lock was held, lands on node 2 after the holder's release and another
// token's grant there, with the renewal's (old) fence; node 1, which the
// release missed, still holds the lock with it: a majority that LOCKINFO
// and a LOCK … TOKEN answer, below the other grant's fence.
//
// Instance A's link to node 2 is cut (blackholed: what A sends is held),
// B's delays node 2's answers 1 s (its node timeout is 10 s). a is granted
// through A by nodes 0 and 1 (fence g). a's RENEW through B reaches node
// 2, finds the key free, and B sends the heal once node 2's answer comes
// back (1 s), to land 3 s later (B's link then delays what it sends). Once the
// renewal has reached node 2, A's link comes back and a's acquire lands
// there; a is released through C, whose link to node 1 is
// cut for good: nodes 0 and 2 delete it (no mark: they held it). b is
// granted through C by nodes 0 and 2 (g+1) and released. The heal then
// lands on node 2, where the key is free, and must take nothing: a's
// acquire raised the mark the renewal wrote when it took the key
// (acquire.lua). Without that, the heal took the key with fence g, and a's
// LOCK … TOKEN through D answered g, below b's.
func TestAttackRaiseHealAfterAnotherGrant(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfgA, cfgB, cfgC, cfgD := testConfig(nodes), testConfig(nodes), testConfig(nodes), testConfig(nodes)
	cutA2 := linked(t, &cfgA, nodes, 2)
	slowB2 := linked(t, &cfgB, nodes, 2)
	cfgB.Redlock.NodeTimeoutMS = 10000 // the heal's NOSCRIPT and EVAL cross the slow link too
	// The renewal's extension and its heal go out at once, not queued
	// behind a batch (a health probe) awaiting its reply across the slow
	// link. A probe pipelined ahead of the heal passes its 1 s deadline on
	// that link: it must not end the connection under the heal (upstream's
	// rearm; before, the heal was lost so in about half the runs).
	cfgB.Redlock.Pipelines = 8
	cutC1 := linked(t, &cfgC, nodes, 1)
	slowD0 := linked(t, &cfgD, nodes, 0)
	inA, inB, inC, inD := startInstance(t, cfgA), startInstance(t, cfgB), startInstance(t, cfgC), startInstance(t, cfgD)
	cA, cB, cC, cD := newClient(t, inA.Addr(), 2), newClient(t, inB.Addr(), 2), newClient(t, inC.Addr(), 2), newClient(t, inD.Addr(), 2)
	warm(t, cA, cB, cC, cD)
	warmHeal(t, cB, nodes)
	key, token := uniqueKey(t), "raise-heal-after-another-grant"
	calls := watchScripts(t, nodes[2], key)
	cutA2.SetBlackhole(true)
	// Node 2's answer comes back 1 s late: within the 2 s a "free" answer
	// counts toward a heal (quorum's freeWithin), whatever B's timeout.
	slowB2.SetReplyDelay(time.Second)
	g := mustLock(t, cA, key, "PX", 30000, "TOKEN", token)
	if v, err := cB.Do(t.Context(), "RENEW", key, token, "PX", 30000).Int64(); err != nil || v <= 0 {
		t.Fatalf("RENEW: %v %v", v, err)
	}
	waitCalls(t, "the renewal on node 2", 1, []*scriptCalls{calls}, extends)
	slowB2.SetRequestDelay(3 * time.Second) // the heal, sent once the answer is back, lands 3 s later
	cutA2.SetBlackhole(false)
	eventually(t, 10*time.Second, "a's acquire lands on node 2", func() bool { return lockHolder(t, nodes[2], key) == token })
	cutC1.SetBlackhole(true) // until the test ends
	if n, err := cC.Do(t.Context(), "UNLOCK", key, token).Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK a: %v %v", n, err)
	}
	b := mustLock(t, cC, key, "PX", 30000)
	if n, err := cC.Do(t.Context(), "UNLOCK", key, b.token).Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK b: %v %v", n, err)
	}
	if lockHolder(t, nodes[2], key) != "" {
		t.Fatal("the interleaving was not forced: the heal landed before b's release (a very slow machine?)")
	}
	waitCalls(t, "the heal on node 2", 1, []*scriptCalls{calls}, heals)
	if lockHolder(t, nodes[2], key) == token {
		t.Errorf("the heal took node 2 for a, released, after b's grant (fence %d)", b.fence)
	}
	slowD0.SetDelay(300 * time.Millisecond)
	again := mustLock(t, cD, key, "PX", 30000, "TOKEN", token)
	if again.fence <= b.fence {
		t.Fatalf("a's LOCK after b's grant (fence %d) answered fence %d (a's first grant: %d)", b.fence, again.fence, g.fence)
	}
}

// warmHeal loads c's instance's renewal and heal scripts on the nodes: it
// locks a fresh key, deletes it on node 2, renews it (which heals node 2)
// and unlocks it. It returns the key.
func warmHeal(t *testing.T, c *redis.Client, nodes []*redistest.Server) string {
	t.Helper()
	wk := uniqueKey(t)
	w := mustLock(t, c, wk, "PX", 30000)
	// The grant is decided on the first majority: node 2's acquire may
	// land after it (a loaded host).
	eventually(t, 10*time.Second, "the warm key on node 2", func() bool { return lockHolder(t, nodes[2], wk) == w.token })
	// The key and its meta, as a node that lost the lock (a meta beside a
	// free key says a hold was released there: no renewal heals it).
	if got := dialRaw(t, nodes[2].Addr()).do("DEL", wk, "lockproxy:meta:"+wk); got != ":2" {
		t.Fatalf("DEL on node 2: %q", got)
	}
	if v, err := c.Do(t.Context(), "RENEW", wk, w.token, "PX", 30000).Int64(); err != nil || v <= 0 {
		t.Fatalf("RENEW: %v %v", v, err)
	}
	eventually(t, 10*time.Second, "the heal of node 2", func() bool { return lockHolder(t, nodes[2], wk) == w.token })
	if n, err := c.Do(t.Context(), "UNLOCK", wk, w.token).Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK: %v %v", n, err)
	}
	return wk
}
