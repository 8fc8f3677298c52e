package instance_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/netfault"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// Issue 24: retries with the same token (LOCK ... TOKEN T) that cannot
// hurt. Each test forces one interleaving that gave two holders at once
// (or a fence of 0) before the fix, on three real redis-servers.

// scriptCalls counts the scripts clients run on one key on one node, as
// MONITOR shows them: acquires (they name the fence floor) and releases
// and rollbacks (they name the release channel).
type scriptCalls struct{ acquires, releases, extends, heals atomic.Int64 }

// watchScripts counts the scripts run on key on node s from now on.
func watchScripts(t *testing.T, s *redistest.Server, key string) *scriptCalls {
	t.Helper()
	c := dialRaw(t, s.Addr())
	if got := c.do("MONITOR"); got != "+OK" {
		t.Fatalf("MONITOR: %q", got)
	}
	_ = c.c.SetReadDeadline(time.Time{})
	calls := &scriptCalls{}
	go func() {
		for {
			l, err := c.rd.ReadString('\n')
			if err != nil {
				return // the test ended
			}
			if strings.Contains(l, " lua] ") || !strings.Contains(l, `"`+key+`"`) {
				continue
			}
			switch {
			case strings.Contains(l, `"lockproxy:released"`):
				calls.releases.Add(1)
			case strings.Contains(l, `"lockproxy:released:`) && strings.Contains(l, `"lockproxy:fence-floor"`) &&
				!strings.Contains(l, `"lockproxy:undone:`):
				calls.heals.Add(1) // extensions name no counter, acquires an undo mark, commits no release mark
			case strings.Contains(l, `"lockproxy:released:`) && !strings.Contains(l, `"lockproxy:undone:`):
				calls.extends.Add(1)
			case strings.Contains(l, `"lockproxy:fence-floor"`):
				calls.acquires.Add(1)
			}
		}
	}()
	return calls
}

// waitCalls waits until count reaches n on every node.
func waitCalls(t *testing.T, what string, n int64, calls []*scriptCalls, count func(*scriptCalls) int64) {
	t.Helper()
	for i, c := range calls {
		eventually(t, 30*time.Second, what+" on watched node "+strconv.Itoa(i), func() bool { return count(c) >= n })
	}
}

func acquires(c *scriptCalls) int64 { return c.acquires.Load() }
func releases(c *scriptCalls) int64 { return c.releases.Load() }
func heals(c *scriptCalls) int64    { return c.heals.Load() }
func extends(c *scriptCalls) int64  { return c.extends.Load() }

// heldEverywhere fails unless every node holds key for token.
func heldEverywhere(t *testing.T, nodes []*redistest.Server, key, token string) {
	t.Helper()
	for i, s := range nodes {
		if got := lockHolder(t, s, key); got != token {
			t.Fatalf("node %d holds %q, want %q: the grant was undone on it", i, got, token)
		}
	}
}

// heldThroughout checks, every few milliseconds for d, that a majority of
// the nodes hold key for token. (Not every node: the later grant's own
// acquire may not have reached the last node, where the first grant's
// close then acts on the first grant's hold, as it should.)
func heldThroughout(t *testing.T, nodes []*redistest.Server, key, token string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		held := 0
		for _, s := range nodes {
			if lockHolder(t, s, key) == token {
				held++
			}
		}
		if held <= len(nodes)/2 {
			t.Fatalf("%d of %d nodes hold %q: the later grant was undone", held, len(nodes), token)
		}
	}
}

// refused fails unless a LOCK of key by another client is refused.
func refused(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	if g, ok, err := lock(t.Context(), c, key, "PX", 10000); ok || err != nil {
		t.Fatalf("another client's LOCK while the retried grant is valid: granted=%v (fence %d) err=%v", ok, g.fence, err)
	}
}

// lockInfoFence is the fence LOCKINFO reports for key.
func lockInfoFence(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	v, err := c.Do(t.Context(), "LOCKINFO", key).Slice()
	if err != nil {
		t.Fatalf("LOCKINFO: %v", err)
	}
	for i := 0; i+1 < len(v); i += 2 {
		if v[i] == "fence" {
			return v[i+1].(int64)
		}
	}
	t.Fatalf("LOCKINFO %v has no fence", v)
	return 0
}

// TestRefusedRetryKeepsGrant (issue 24.1): a lease is granted; with two
// nodes paused, the holder retries LOCK with the same token and is
// refused. Neither the retry's rollback on the node that answered nor the
// retry's late acquire and carried rollback on the paused nodes once they
// run again remove the grant it retried: every node still holds it with
// its fence and another client is refused.
func TestRefusedRetryKeepsGrant(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	c, other := newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2)
	key, token := uniqueKey(t), "retry-token-1"
	g := mustLock(t, c, key, "PX", 60000, "TOKEN", token)
	heldOn(t, nodes, key, token)
	calls := []*scriptCalls{watchScripts(t, nodes[1], key), watchScripts(t, nodes[2], key)}
	pause(t, nodes[1])
	pause(t, nodes[2])
	if _, ok, err := lock(t.Context(), c, key, "PX", 60000, "TOKEN", token); ok || err == nil {
		t.Fatalf("retry with two of three nodes paused: granted=%v err=%v; want an error", ok, err)
	}
	resume(t, nodes[1])
	resume(t, nodes[2])
	waitCalls(t, "the retry's rollback", 1, calls, releases)
	heldEverywhere(t, nodes, key, token)
	refused(t, other, key)
	if f := lockInfoFence(t, other, key); f != g.fence {
		t.Fatalf("LOCKINFO fence %d, want the grant's %d", f, g.fence)
	}
}

// heldOn waits until every node holds key for token: LOCK answers once a
// majority did.
func heldOn(t *testing.T, nodes []*redistest.Server, key, token string) {
	t.Helper()
	for i, s := range nodes {
		eventually(t, 20*time.Second, "node "+strconv.Itoa(i)+" holds the grant", func() bool {
			return lockHolder(t, s, key) == token
		})
	}
}

// TestLateFirstAttemptKeepsRetry (issue 24.2): instance 1 reaches two of
// the three nodes through a link that delays 3 s. The client gives up on
// LOCK ... TOKEN T through instance 1 after 0.2 s and retries through
// instance 2, which grants it. Instance 1's acquires then land on the
// delayed nodes (the retry holds the key there); the link recovers and
// instance 1's carried rollback lands too: neither removes the retry's
// grant.
func TestLateFirstAttemptKeepsRetry(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg1 := testConfig(nodes)
	var links []*netfault.Proxy
	for i := 1; i < 3; i++ {
		p, err := netfault.Listen(nodes[i].Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		links = append(links, p)
		cfg1.Redlock.Nodes[i] = p.Addr()
	}
	in1, in2 := startInstance(t, cfg1), startInstance(t, testConfig(nodes))
	c1, c2, other := newClient(t, in1.Addr(), 2), newClient(t, in2.Addr(), 2), newClient(t, in2.Addr(), 2)
	for _, c := range []*redis.Client{c1, c2} { // both instances reach every node
		mustLock(t, c, uniqueKey(t), "PX", 1000)
	}
	const delay = 3 * time.Second
	for _, p := range links {
		p.SetDelay(delay)
	}
	key, token := uniqueKey(t), "retry-token-2"
	calls := []*scriptCalls{watchScripts(t, nodes[1], key), watchScripts(t, nodes[2], key)}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, ok, err := lock(ctx, c1, key, "PX", 30000, "TOKEN", token)
	cancel()
	if ok || err == nil {
		t.Fatalf("LOCK through the slow instance answered within 0.2 s: granted=%v err=%v", ok, err)
	}
	g := mustLock(t, c2, key, "PX", 30000, "TOKEN", token)
	heldOn(t, nodes, key, token)
	waitCalls(t, "instance 1's late acquire", 2, calls, acquires) // after instance 2's
	for _, p := range links {
		p.SetDelay(0) // the link recovers: instance 1's carried rollback gets through
	}
	waitCalls(t, "instance 1's rollback", 1, calls, releases)
	heldEverywhere(t, nodes, key, token)
	refused(t, other, key)
	if f := lockInfoFence(t, other, key); f != g.fence {
		t.Fatalf("LOCKINFO fence %d, want the retry's %d", f, g.fence)
	}
}

// boundRetry takes key bound on conn1, retries it with the same token on
// conn2 and closes conn1: the lock belongs to conn2, is kept alive (on a
// majority) for three bound leases after the close, refused to others, and
// goes when conn2 closes.
func boundRetry(t *testing.T, nodes []*redistest.Server, conn1, conn2, other *redis.Client) {
	key, token := uniqueKey(t), "retry-token-3"
	g1 := mustLock(t, conn1, key, "TOKEN", token)
	g2 := mustLock(t, conn2, key, "TOKEN", token)
	if g2.fence != g1.fence {
		t.Fatalf("retry on a new connection: fence %d, want %d", g2.fence, g1.fence)
	}
	heldOn(t, nodes, key, token)
	if err := conn1.Close(); err != nil {
		t.Fatal(err)
	}
	heldThroughout(t, nodes, key, token, 3*1500*time.Millisecond) // testConfig's bound lease is 1.5 s
	refused(t, other, key)
	if err := conn2.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the lock goes with the connection granted last", func() bool {
		_, ok, err := lock(t.Context(), other, key, "PX", 10000)
		return ok && err == nil
	})
}

// TestBoundRetryOwnedByLastConnection (issue 24.3): a connection-bound
// lock granted again, with its token, on a second connection of the same
// instance belongs to that connection: the first one's close leaves it.
func TestBoundRetryOwnedByLastConnection(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	boundRetry(t, nodes, newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2))
}

// TestBoundRetryAcrossInstances (issue 24.3): the same through two
// instances: the first instance's close releases only what it granted,
// not the second instance's later grant of the same token.
func TestBoundRetryAcrossInstances(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	in1, in2 := startInstance(t, testConfig(nodes)), startInstance(t, testConfig(nodes))
	boundRetry(t, nodes, newClient(t, in1.Addr(), 2), newClient(t, in2.Addr(), 2), newClient(t, in2.Addr(), 2))
}

// TestBoundRetryAcrossInstancesLockDelay (issue 24.3): the same with a
// lock-delay: the first instance's close, which would make its own grant a
// lease of the delay, leaves the second instance's later grant bound and
// renewed.
func TestBoundRetryAcrossInstancesLockDelay(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Locks.LockDelayMS = 1000
	in1, in2 := startInstance(t, cfg), startInstance(t, cfg)
	boundRetry(t, nodes, newClient(t, in1.Addr(), 2), newClient(t, in2.Addr(), 2), newClient(t, in2.Addr(), 2))
}

// TestRetryFenceAfterMetaExpired (issue 24.4): a script outside the
// catalog extends the lock key, so lockproxy's bookkeeping of the hold
// expires before it. A retry with the token keeps a fence no lower than
// its grant's (never 0), and LOCKINFO shows it again.
func TestRetryFenceAfterMetaExpired(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	c := newClient(t, in.Addr(), 2)
	key, token := uniqueKey(t), "retry-token-4"
	g := mustLock(t, c, key, "PX", 1500, "TOKEN", token)
	heldOn(t, nodes, key, token)
	if n, err := c.Eval(t.Context(), extendIfHeld, []string{key}, token, 60000).Int(); n != 1 || err != nil {
		t.Fatalf("the script's PEXPIRE: %v %v", n, err)
	}
	for i, s := range nodes {
		raw := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		eventually(t, 20*time.Second, "node "+strconv.Itoa(i)+"'s meta hash expired", func() bool {
			return raw.Exists(t.Context(), "lockproxy:meta:"+key).Val() == 0
		})
		raw.Close()
	}
	heldEverywhere(t, nodes, key, token)
	r := mustLock(t, c, key, "PX", 10000, "TOKEN", token)
	if r.fence < g.fence {
		t.Fatalf("retry after the bookkeeping expired: fence %d, below the grant's %d", r.fence, g.fence)
	}
	if f := lockInfoFence(t, c, key); f != r.fence {
		t.Fatalf("LOCKINFO fence %d, want the retry's %d", f, r.fence)
	}
}

// TestCarriedReleaseSparesNewGrant (issue 24): an UNLOCK whose outcome is
// unknown is carried on to the nodes that did not answer. Instance 1
// reaches node 2 through a link that delays 3 s; node 1 is paused. The
// holder's UNLOCK through instance 1 is undecided; node 1 resumes and gets
// the carried release, and the client locks again with the same token
// through instance 2 (on node 2 it takes the key, or refreshes the old hold
// if instance 1's release has not got through). When the link recovers,
// instance 1's carried release reaches node 2 late: it is bound to the hold
// it released, and the new grant stays on every node.
func TestCarriedReleaseSparesNewGrant(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg1 := testConfig(nodes)
	link, err := netfault.Listen(nodes[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	cfg1.Redlock.Nodes[2] = link.Addr()
	in1, in2 := startInstance(t, cfg1), startInstance(t, testConfig(nodes))
	c1, c2, other := newClient(t, in1.Addr(), 2), newClient(t, in2.Addr(), 2), newClient(t, in2.Addr(), 2)
	mustLock(t, c1, uniqueKey(t), "PX", 1000) // instance 1 reaches every node
	key, token := uniqueKey(t), "retry-token-5"
	calls := watchScripts(t, nodes[2], key)
	mustLock(t, c2, key, "PX", 30000, "TOKEN", token)
	heldOn(t, nodes, key, token)
	link.SetDelay(3 * time.Second)
	pause(t, nodes[1])
	if n, err := c1.Do(t.Context(), "UNLOCK", key, token).Int(); err == nil {
		t.Fatalf("UNLOCK with a node paused and one slow = %d; want an unknown outcome", n)
	}
	resume(t, nodes[1])
	for i, s := range nodes[:2] { // node 2 still holds it, or not: its release may not be through
		eventually(t, 30*time.Second, "node "+strconv.Itoa(i)+" released", func() bool { return lockHolder(t, s, key) == "" })
	}
	g := mustLock(t, c2, key, "PX", 30000, "TOKEN", token)
	heldOn(t, nodes, key, token)
	landed := releases(calls)
	link.SetDelay(0) // instance 1's carried release gets through
	waitCalls(t, "instance 1's carried release", landed+1, []*scriptCalls{calls}, releases)
	heldEverywhere(t, nodes, key, token)
	refused(t, other, key)
	if f := lockInfoFence(t, other, key); f != g.fence {
		t.Fatalf("LOCKINFO fence %d, want the new grant's %d", f, g.fence)
	}
}

// TestRetryAnswersItsGrantsFence: instance 1 reaches node 2 through a link
// that delays 1 s, and node 2's counter runs far ahead of the others'. A
// LOCK … TOKEN through instance 1 is granted by nodes 0 and 1 (they agree
// on its fence) before its acquire reaches node 2, which then takes the
// key with its own counter. Before instance 1 commits the grant's fence to
// node 2 (the reply and the commit cross the slow link), the client
// retries through instance 2, whose link to node 1 is slower than to the
// others: the first majority it hears, nodes 0 and 2, disagree. The retry
// must answer the grant's fence (PRODUCT.md: "succeeds again with the
// same fencing token"), not node 2's.
func TestRetryAnswersItsGrantsFence(t *testing.T) {
	st := aheadStage(t, nil)
	nodes, c1, c2, slow2, slow1 := st.nodes, st.c1, st.c2, st.link12, st.link21
	other := newClient(t, st.in2.Addr(), 2)
	slow2.SetDelay(time.Second)
	key, token := uniqueKey(t), "retry-token-4"
	g := mustLock(t, c1, key, "PX", 30000, "TOKEN", token)
	eventually(t, 10*time.Second, "node 2 takes the key late", func() bool { return lockHolder(t, nodes[2], key) == token })
	slow1.SetDelay(300 * time.Millisecond)
	again := mustLock(t, c2, key, "PX", 30000, "TOKEN", token)
	if again.fence != g.fence {
		t.Fatalf("retry answered fence %d, the grant's was %d", again.fence, g.fence)
	}
	slow1.SetDelay(0)
	slow2.SetDelay(0)
	if f := lockInfoFence(t, other, key); f != g.fence {
		t.Fatalf("LOCKINFO fence %d, want the grant's %d", f, g.fence)
	}
}

// stage is what aheadStage starts.
type stage struct {
	nodes          []*redistest.Server
	in1, in2       *instance.Instance
	c1, c2         *redis.Client   // a client of each instance
	link12, link21 *netfault.Proxy // instance 1's link to node 2, instance 2's to node 1
}

// aheadStage starts the stage of the retry-fence tests: three
// redis-servers, node 2's fencing counter 1000 ahead of the others' (as
// when a node took grants of other keys in another order), and two warm
// instances, instance 1 reaching node 2 and instance 2 reaching node 1
// through links of their own; tweak, if not nil, changes instance 2's
// config first.
func aheadStage(t *testing.T, tweak func(*instance.Config)) stage {
	t.Helper()
	st := stage{nodes: redistest.StartN(t, 3, redistest.Options{})}
	cfg1, cfg2 := testConfig(st.nodes), testConfig(st.nodes)
	st.link12, st.link21 = linked(t, &cfg1, st.nodes, 2), linked(t, &cfg2, st.nodes, 1)
	if tweak != nil {
		tweak(&cfg2)
	}
	st.in1, st.in2 = startInstance(t, cfg1), startInstance(t, cfg2)
	st.c1, st.c2 = newClient(t, st.in1.Addr(), 2), newClient(t, st.in2.Addr(), 2)
	warm(t, st.c1, st.c2)
	raw := redis.NewClient(&redis.Options{Addr: st.nodes[2].Addr()})
	defer raw.Close()
	if err := raw.IncrBy(t.Context(), "lockproxy:layout", 1000).Err(); err != nil {
		t.Fatal(err)
	}
	return st
}
