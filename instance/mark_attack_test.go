package instance_test

import (
	"context"
	"strings"
	"sync/atomic"
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
// The order that only repair.lua's raise guards: the script runs on the
// drifted node before the renewal finds the key free there (so the
// guard's own raise, GuardStated's, comes before the renewal's mark and
// voids nothing), and the repair lands after it. A renewal that finds the
// key free after the repair heals nothing (the key is a's there); one
// that finds it free before the script is voided by the guard's raise as
// well (TestAttackMarkClientScriptTakesAfterRenewal's order, which this
// test had before, and passed with repair.lua's raise removed).
//
// a is granted on every node through A; node 2 loses the key and its meta
// (DEL, as a node that missed the grant). The client runs its own extend
// script through E, whose link to node 2 delays its answers 0.8 s: nodes 0
// and 1 extend, node 2 has no key (the script has run there once node 2
// reports the key's state, DUMP in MONITOR). Then a's RENEW through B
// (link to node 2 delays its answers 1 s) finds node 2 free and marks
// it; B sends the heal once node 2's answer is back, to land 5 s later
// (the link then delays what B sends). Node 2's states reach E, which
// repairs node 2: the RESTORE takes a's token there. a is released through
// C, whose link to node 1 is then cut: nodes 0 and 2 delete it (node 2
// leaves no mark: it held the key). The heal then lands on node 2, where
// the key is free: it must take nothing. Without repair.lua's raise, it
// took node 2 with a's fence: nodes 1 and 2 held a again after its
// release (UNLOCK answered 1), and LOCKINFO through D showed a as the
// holder (fence 7, validity 22 s left on redis-servers).
func TestAttackMarkRepairRestoreAfterRenewal(t *testing.T) {
	// The client's own extend, not in the catalog: it runs on every node.
	const extend = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return -1"
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfgA, cfgB, cfgC, cfgD, cfgE := testConfig(nodes), testConfig(nodes), testConfig(nodes), testConfig(nodes), testConfig(nodes)
	slowB2 := linked(t, &cfgB, nodes, 2)
	cfgB.Redlock.NodeTimeoutMS = 10000 // the heal's NOSCRIPT and EVAL cross the slow link too
	// The renewal's extension goes out at once, not queued behind a batch
	// (a health probe) awaiting its reply across the slow link: its answer
	// must come back within the 2 s a "free" answer counts toward a heal.
	cfgB.Redlock.Pipelines = 8
	cutC1 := linked(t, &cfgC, nodes, 1)
	slowD0 := linked(t, &cfgD, nodes, 0)
	slowE2 := linked(t, &cfgE, nodes, 2)
	// Node 2's turn and the script's states each cross E's slow link: E
	// waits for them (the turn lasts the script's 5 s time limit and a
	// second: the repair lands within it).
	cfgE.Redlock.NodeTimeoutMS = 10000
	cfgE.Redlock.Pipelines = 8
	inA, inB, inC, inD, inE := startInstance(t, cfgA), startInstance(t, cfgB), startInstance(t, cfgC), startInstance(t, cfgD), startInstance(t, cfgE)
	cA, cB, cC, cD, cE := newClient(t, inA.Addr(), 2), newClient(t, inB.Addr(), 2), newClient(t, inC.Addr(), 2), newClient(t, inD.Addr(), 2), newClient(t, inE.Addr(), 2)
	warm(t, cA, cB, cC, cD, cE)
	wk := warmHeal(t, cB, nodes)
	// The script's turn, guard and repair, loaded on every node, and E's
	// connections to node 2 open: node 2 alone holds wk, the repair
	// deletes it there.
	if got := dialRaw(t, nodes[2].Addr()).do("SET", wk, "drift"); got != "+OK" {
		t.Fatalf("SET on node 2: %q", got)
	}
	if err := cE.Do(t.Context(), "EVAL", extend, 1, wk, "nobody", 1000).Err(); err != nil {
		t.Fatalf("EVAL: %v", err)
	}
	eventually(t, 10*time.Second, "the repair of wk on node 2", func() bool { return lockHolder(t, nodes[2], wk) == "" })

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
	ran := watchStates(t, nodes[2], key)
	slowE2.SetReplyDelay(800 * time.Millisecond)
	type result struct {
		v   int64
		err error
	}
	script := make(chan result, 1)
	go func() {
		v, err := cE.Do(context.Background(), "EVAL", extend, 1, key, token, 30000).Int64()
		script <- result{v, err}
	}()
	eventually(t, 10*time.Second, "the client's extend on node 2", func() bool { return ran.Load() >= 1 })
	// Node 2's answer to the renewal comes back 1 s late: within the 2 s a
	// "free" answer counts toward a heal (quorum's freeWithin).
	slowB2.SetReplyDelay(time.Second)
	if v, err := cB.Do(t.Context(), "RENEW", key, token, "PX", 30000).Int64(); err != nil || v <= 0 {
		t.Fatalf("RENEW: %v %v", v, err)
	}
	// The renewal marks node 2 only where it finds the key free: before
	// the repair (after it, the key is a's and is extended).
	mark := "lockproxy:released:" + key
	eventually(t, 10*time.Second, "the renewal marks node 2 (before the repair)", func() bool {
		return dialRaw(t, nodes[2].Addr()).do("EXISTS", mark) == ":1"
	})
	slowB2.SetRequestDelay(5 * time.Second) // the heal, sent once the answer is back, lands 5 s later
	eventually(t, 10*time.Second, "node 2 repaired for a", func() bool { return lockHolder(t, nodes[2], key) == token })
	select {
	case r := <-script:
		if r.v != 1 || r.err != nil {
			t.Fatalf("the client's extend: %v %v", r.v, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the client's extend did not answer")
	}
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

// watchStates counts the runs on node s of a client's script under its
// turn that report key's state (GuardStated's DUMP, as MONITOR shows it).
func watchStates(t *testing.T, s *redistest.Server, key string) *atomic.Int64 {
	t.Helper()
	c := dialRaw(t, s.Addr())
	if got := c.do("MONITOR"); got != "+OK" {
		t.Fatalf("MONITOR: %q", got)
	}
	_ = c.c.SetReadDeadline(time.Time{})
	n := &atomic.Int64{}
	want := ` lua] "DUMP" "` + key + `"`
	go func() {
		for {
			l, err := c.rd.ReadString('\n')
			if err != nil {
				return // the test ended
			}
			if strings.Contains(l, want) {
				n.Add(1)
			}
		}
	}()
	return n
}

// TestAttackMarkClientScriptTakesAfterRenewal: the client's own "extend
// mine, else take if free" script, outside the catalog, takes the key on
// a node after a renewal found it free there. That take must void the
// heals decided before it, as an acquire's does: GuardStated raises the
// key's mark before the script's body runs.
//
// a is granted on every node through A; node 2 loses the key and its meta
// (DEL, as a node that missed the grant). a's RENEW through B (link to
// node 2 delays its answers 1 s) finds node 2 free and marks it; B sends
// the heal once node 2's answer is back, to land 4 s later (the link then
// delays what B sends). Meanwhile the client runs its script through C:
// nodes 0 and 1 extend, node 2 has no key and the script takes it for a
// (every node ends alike: no repair). a is released through C, whose link
// to node 1 is then cut: nodes 0 and 2 delete it (node 2 leaves no mark:
// it held the key). The heal then lands on node 2, where the key is free:
// it must take nothing. Without GuardStated's raise, it took node 2 with
// a's fence: nodes 1 and 2 held a again after its release (UNLOCK
// answered 1), and LOCKINFO through D showed a as the holder (fence 6,
// validity 23 s left on redis-servers).
func TestAttackMarkClientScriptTakesAfterRenewal(t *testing.T) {
	const extendOrTake = "local v = redis.call('GET', KEYS[1]) " +
		"if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end " +
		"if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end return -1"
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
	if err := cC.Do(t.Context(), "EVAL", extendOrTake, 1, wk, "nobody", 1000).Err(); err != nil {
		t.Fatalf("EVAL: %v", err) // the script's turn and guard, loaded on every node
	}

	key, token := uniqueKey(t), "mark-client-script"
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
	if v, err := cC.Do(t.Context(), "EVAL", extendOrTake, 1, key, token, 30000).Int64(); v != 1 || err != nil {
		t.Fatalf("the client's script: %v %v", v, err)
	}
	eventually(t, 5*time.Second, "node 2 taken for a by the script", func() bool { return lockHolder(t, nodes[2], key) == token })
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
