package instance_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// Attacks on the raise of the release mark (5a6dd87): whatever takes a
// key on a node after a renewal found it free there must raise the key's
// release mark (lockproxy:released:<key>), so that a heal decided from
// that renewal, held up on its link, takes nothing once that hold is
// gone. acquire.lua and heal.lua raise it; these look for other takes.

// TestAttackMarkRepairRestoreAfterRenewal: a script outside the catalog
// that writes the lock key runs under its turn on every node and repairs
// a node that drifted (repair.lua: RESTORE of the majority's state). That
// RESTORE takes the key on the node for the holder's token, as an acquire
// would, so it must void the heals decided before it, as an acquire does.
//
// a is granted on every node through A; node 2 loses the key (DEL, as a
// node that missed the grant). a's RENEW through B (link to node 2 delays
// its answers 1 s) finds node 2 free and marks it; B sends the heal once
// node 2's answer is back, to land 4 s later (the link then delays what B
// sends). Meanwhile the client runs its own
// extend script through C: nodes 0 and 1 extend, node 2 has no key, and
// the repair RESTOREs a's token there. a is released through C, whose link
// to node 1 is then cut: nodes 0 and 2 delete it (node 2 leaves no mark:
// it held the key). The heal then lands on node 2, where the key is free:
// it must take nothing. Without a raise by the RESTORE, it took node 2 with
// a's fence: nodes 1 and 2 held a again after its release (UNLOCK answered
// 1), and LOCKINFO through D showed a as the holder (fence 6, validity
// 21 s left on redis-servers).
func TestAttackMarkRepairRestoreAfterRenewal(t *testing.T) {
	// The client's own extend, not in the catalog: it runs on every node.
	const extend = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return -1"
	scriptTakesAfterRenewal(t, extend, 1)
}

// TestAttackMarkClientScriptTakesAfterRenewal: as
// TestAttackMarkRepairRestoreAfterRenewal, with the client's own "extend
// mine, else take if free" script, outside the catalog: on node 2 the
// script itself takes the key for a (no repair: every node ends alike).
// That take must void the heals decided before it too.
func TestAttackMarkClientScriptTakesAfterRenewal(t *testing.T) {
	const extendOrTake = "local v = redis.call('GET', KEYS[1]) " +
		"if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end " +
		"if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end return -1"
	scriptTakesAfterRenewal(t, extendOrTake, 1)
}

// scriptTakesAfterRenewal is the sequence of the two tests above, with
// the client's script extend (KEYS[1], ARGV[1] token, ARGV[2] ms), which
// answers want for a held key and -1 for a free one.
func scriptTakesAfterRenewal(t *testing.T, extend string, want int64) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfgA, cfgB, cfgC, cfgD := testConfig(nodes), testConfig(nodes), testConfig(nodes), testConfig(nodes)
	slowB2 := linked(t, &cfgB, nodes, 2)
	cfgB.Redlock.NodeTimeoutMS = 10000 // the heal's NOSCRIPT and EVAL cross the slow link too
	// The renewal's extension goes out at once, not queued behind a batch
	// (a health probe) awaiting its reply across the slow link: its answer
	// must come back within the 2 s a "free" answer counts toward a heal.
	cfgB.Redlock.Pipelines = 8
	cutC1 := linked(t, &cfgC, nodes, 1)
	slowD0 := linked(t, &cfgD, nodes, 0)
	inA, inB, inC, inD := startInstance(t, cfgA), startInstance(t, cfgB), startInstance(t, cfgC), startInstance(t, cfgD)
	cA, cB, cC, cD := newClient(t, inA.Addr(), 2), newClient(t, inB.Addr(), 2), newClient(t, inC.Addr(), 2), newClient(t, inD.Addr(), 2)
	warm(t, cA, cB, cC, cD)
	wk := warmHeal(t, cB, nodes)
	if err := cC.Do(t.Context(), "EVAL", extend, 1, wk, "nobody", 1000).Err(); err != nil {
		t.Fatalf("EVAL: %v", err) // the script's turn and guard, loaded on every node
	}

	key, token := uniqueKey(t), "mark-repair-restore"
	calls := watchScripts(t, nodes[2], key)
	g := mustLock(t, cA, key, "PX", 30000, "TOKEN", token)
	// The grant is decided on the first majority: node 2's acquire may
	// land after it (a loaded host).
	raw2 := dialRaw(t, nodes[2].Addr())
	eventually(t, 10*time.Second, "a's key on node 2", func() bool { return raw2.do("EXISTS", key) == ":1" })
	// The key and its meta, as a node that lost the lock (a meta beside a
	// free key says a hold was released there: no renewal heals it).
	if got := raw2.do("DEL", key, "lockproxy:meta:"+key); got != ":2" {
		t.Fatalf("DEL on node 2: %q", got)
	}
	// Node 2's answer comes back 1 s late: within the 2 s a "free" answer
	// counts toward a heal (quorum's freeWithin), whatever B's timeout.
	slowB2.SetReplyDelay(time.Second)
	if v, err := cB.Do(t.Context(), "RENEW", key, token, "PX", 30000).Int64(); err != nil || v <= 0 {
		t.Fatalf("RENEW: %v %v", v, err)
	}
	mark := "lockproxy:released:" + key
	eventually(t, 10*time.Second, "the renewal marks node 2", func() bool {
		return dialRaw(t, nodes[2].Addr()).do("EXISTS", mark) == ":1"
	})
	slowB2.SetRequestDelay(4 * time.Second) // the heal, sent once the answer is back, lands 4 s later
	if v, err := cC.Do(t.Context(), "EVAL", extend, 1, key, token, 30000).Int64(); v != want || err != nil {
		t.Fatalf("the client's extend: %v %v", v, err)
	}
	eventually(t, 5*time.Second, "node 2 taken for a by the script or its repair", func() bool { return lockHolder(t, nodes[2], key) == token })
	cutC1.SetBlackhole(true) // until the test ends
	if n, err := cC.Do(t.Context(), "UNLOCK", key, token).Int(); n != 1 || err != nil {
		t.Fatalf("UNLOCK a: %v %v", n, err)
	}
	if lockHolder(t, nodes[2], key) != "" || heals(calls) != 0 {
		t.Fatal("the interleaving was not forced: the heal landed before a's release (a very slow machine?)")
	}
	waitCalls(t, "the heal on node 2", 1, []*scriptCalls{calls}, heals)
	if lockHolder(t, nodes[2], key) == token {
		t.Errorf("the heal took node 2 for a, released (fence %d): with node 1, which the release missed, a majority", g.fence)
	}
	slowD0.SetDelay(300 * time.Millisecond)
	if v, err := cD.Do(t.Context(), "LOCKINFO", key).Slice(); err != redis.Nil {
		t.Errorf("LOCKINFO after a's release: %v %v, want the key free (nil)", v, err)
	}
}
