package upstream

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Tests of healing (quorum/heal.go): a renewal takes a lock a majority
// holds again on the nodes that lost it, on real redis-servers.

// holdsWith reports whether the node behind raw holds key for token with
// the fence recorded in its meta.
func holdsWith(t *testing.T, addr, key, token string, fence int64) bool {
	t.Helper()
	raw := rawClient(t, addr)
	v, err := raw.Get(t.Context(), key).Result()
	if err != nil || v != token {
		return false
	}
	m, err := readMeta(t.Context(), raw, key)
	return err == nil && m["fence"] == strconv.FormatInt(fence, 10)
}

// healCtx bounds a test that waits out several hold-outs.
func healCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// restartEmpty kills server i and starts it again without its data.
func restartEmpty(t *testing.T, s *redistest.Server) {
	t.Helper()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
}

// TestWatchdogLockHealsAcrossRestarts: a connection-bound lock, renewed by
// the watchdog, on three nodes without fsync. Node 0 restarts empty; once
// its hold-out is over the renewals take the lock again there, with its
// fence. Then node 1, and three more single-node restarts one at a time: a
// majority is up and counted at every moment, so the lock is never lost,
// and every node ends holding it with the same fence. Without healing the
// lock stays off node 0, and node 1's restart loses it.
func TestWatchdogLockHealsAcrossRestarts(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	const lease = 1500 * time.Millisecond // the bound lease and the longest lease: a short hold-out
	r := restartRedlock(t, servers, lease)
	waitCounted(t, r, 30*time.Second, true, true, true)
	e, err := engine.New(func(engine.Events) (engine.Backend, error) { return r, nil },
		engine.Config{BoundLease: lease, RenewEvery: lease / 5}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	o := e.NewOwner(1)
	var mu sync.Mutex
	var lost []string
	o.OnLost(func(key, reason string) {
		mu.Lock()
		lost = append(lost, key+": "+reason)
		mu.Unlock()
	})
	noLoss := func(when string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(lost) > 0 {
			t.Fatalf("%s: LOCKLOST %v", when, lost)
		}
		if err := o.TakeLost("k"); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	ctx := healCtx(t)
	g, err := e.Lock(ctx, o, "k", engine.Hold{Token: "a", Name: "leader"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Release(context.Background()) })
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	for step, i := range []int{0, 1, 2, 0, 1} {
		restartEmpty(t, servers[i])
		want := []bool{true, true, true}
		want[i] = false
		waitCounted(t, r, 30*time.Second, want...)
		noLoss(fmt.Sprintf("restart %d (node %d), held out", step+1, i))
		waitCounted(t, r, 30*time.Second, true, true, true)
		eventually(t, 30*time.Second, fmt.Sprintf("restart %d: node %d holds k for a with fence %d again", step+1, i, g.Fence), func() bool {
			return holdsWith(t, servers[i].Addr(), "k", "a", g.Fence)
		})
		noLoss(fmt.Sprintf("restart %d (node %d), healed", step+1, i))
	}
	for i, s := range servers {
		if !holdsWith(t, s.Addr(), "k", "a", g.Fence) {
			t.Errorf("node %d does not hold k for a with fence %d at the end", i, g.Fence)
		}
		c, err := nodeCounter(ctx, rawClient(t, s.Addr()))
		if err != nil || c < g.Fence {
			t.Errorf("node %d: the node's fencing counter %d %v below the fence %d", i, c, err, g.Fence)
		}
	}
	if r.Healed() < 5 {
		t.Errorf("healed %d times over five restarts", r.Healed())
	}
	noLoss("the end")
	// The connection's close releases the lock on every node, healed ones
	// too (the release is bound to the grant's attempt, which the heals
	// recorded), and a later grant counts above the healed fence.
	if err := o.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		if n, err := rawClient(t, s.Addr()).Exists(ctx, "k").Result(); err != nil || n != 0 {
			t.Errorf("node %d still holds k after the close: %d %v", i, n, err)
		}
	}
	g2, err := r.Acquire(ctx, "k", hold("b", lease))
	if err != nil || g2.Fence <= g.Fence {
		t.Fatalf("b after a: %+v %v (a's fence %d)", g2, err, g.Fence)
	}
}

// TestRenewHealsLease: RENEW of a lease takes it again on a node that
// restarted empty, once that node is counted, with the lease's fence; a
// node held out by the restart rule is not healed.
func TestRenewHealsLease(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	const lease = 1500 * time.Millisecond
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	var tmu sync.Mutex
	var trace []string
	r := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond, OnTrust: func(i int, counted bool, why string) {
		tmu.Lock()
		trace = append(trace, fmt.Sprintf("%s node %d counted=%v %s", time.Now().Format("05.000"), i, counted, why))
		tmu.Unlock()
	}})
	t.Cleanup(func() { r.Close() })
	waitCounted(t, r, 30*time.Second, true, true, true)
	e, err := engine.New(func(engine.Events) (engine.Backend, error) { return r, nil }, engine.Config{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := healCtx(t)
	o := e.NewOwner(1)
	g, err := e.Lock(ctx, o, "l", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "l", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	restartEmpty(t, servers[0])
	// RENEW every lease/5 (as a client keeping its lease would) until node
	// 0 is counted again and holds the lease: while it is held out,
	// renewals put nothing there.
	heldOut := 0
	eventually(t, 30*time.Second, "node 0 holds l again", func() bool {
		time.Sleep(lease / 5)
		v, err := e.Renew(ctx, "l", "a", 0)
		if err != nil {
			t.Fatal(err)
		}
		// Read the node first, then whether it is counted: a node still not
		// counted after the read was not counted at any moment before it
		// (a late answer to this renewal can still heal it once it is).
		n, err := rawClient(t, servers[0].Addr()).Exists(ctx, "l").Result()
		if !r.Counted()[0] {
			heldOut++
			if err != nil || n != 0 {
				tmu.Lock()
				defer tmu.Unlock()
				t.Fatalf("%s node 0, held out, holds l: %d %v (held out %+v, healed %d, renewals %d)\n%s", time.Now().Format("05.000"), n, err, r.HeldOut(), r.Healed(), heldOut, strings.Join(trace, "\n"))
			}
			return false
		}
		ok := holdsWith(t, servers[0].Addr(), "l", "a", g.Fence)
		if ok {
			// The healed key ends no later than the validity the holder was
			// told, but for a millisecond: the node reads its clock in whole
			// milliseconds.
			pttl, err := rawClient(t, servers[0].Addr()).PTTL(ctx, "l").Result()
			if err != nil || pttl > v+time.Millisecond {
				t.Fatalf("healed key's PTTL %v beyond the validity %v told (%v)", pttl, v, err)
			}
		}
		return ok
	})
	if heldOut == 0 {
		t.Fatal("node 0 never seen held out: the restart rule was not exercised")
	}
	raw := rawClient(t, servers[0].Addr())
	meta, err := readMeta(ctx, raw, "l")
	if err != nil || meta["mode"] != string(engine.Lease) || meta["name"] != "client-a" || meta["took"] != "0" || meta["ttl"] != strconv.Itoa(int(lease.Milliseconds())) {
		t.Fatalf("healed meta %v %v", meta, err)
	}
}

// gatedNode holds each op of one kind (and of one key, if key is set)
// sent to its node until the test lets it go, so that the test can change
// the node between the step that decided the op (the renewal that decided
// a heal, the grant that sent a commit) and the op itself. A held op is
// sent on a context of its own: as a call that the network delayed after
// it was sent.
type gatedNode struct {
	quorum.Node
	kind    quorum.OpKind
	key     string
	pending chan *quorum.Op   // an op is held
	gate    chan struct{}     // one value lets one op go
	landed  chan quorum.Reply // its answer
}

// newGate is a gatedNode for ops of kind (on key, unless empty); set its
// Node before use.
func newGate(kind quorum.OpKind, key string) *gatedNode {
	return &gatedNode{kind: kind, key: key, pending: make(chan *quorum.Op, 8), gate: make(chan struct{}), landed: make(quorum.Replies, 8)}
}

func (g *gatedNode) Do(ctx context.Context, op *quorum.Op, tag int, done quorum.Sink) {
	if op.Kind != g.kind || g.key != "" && op.Key != g.key {
		g.Node.Do(ctx, op, tag, done)
		return
	}
	g.pending <- op
	go func() {
		<-g.gate
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), testTimeout)
		defer cancel()
		mine := make(quorum.Replies, 1)
		g.Node.Do(c, op, tag, mine)
		rep := <-mine
		g.landed <- rep
		done.Put(rep)
	}()
}

// TestHealRaces: what lands on a node between the renewal that found the
// key free there and the heal. First, nothing: the heal takes the key
// with the lock's fence, for no longer than the validity told. Then
// another holder takes the key there (a string of another token, or a
// hash): the heal leaves it. Then the holder releases the lock: the heal
// does not take it again.
func TestHealRaces(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	gated, r := gatedRedlock(t, servers, 0, quorum.OpHeal, quorum.Config{})
	ctx := testCtx(t)
	raw := rawClient(t, servers[0].Addr())
	// take grants key to token and leaves node 0 without it.
	take := func(key, token string) engine.Grant {
		t.Helper()
		g, err := r.Acquire(ctx, key, hold(token, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		heldOn(t, key, token, servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
		if err := raw.Del(ctx, key, DefaultPrefix+"meta:"+key).Err(); err != nil {
			t.Fatal(err)
		}
		return g
	}
	// renew extends key and returns the validity once node 0's heal is held.
	renew := func(key, token string) time.Duration {
		t.Helper()
		v, err := r.Extend(ctx, key, token, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-gated.pending:
		case <-time.After(testTimeout):
			t.Fatalf("no heal of %s sent to node 0", key)
		}
		return v
	}
	land := func() time.Duration {
		t.Helper()
		gated.gate <- struct{}{}
		rep := <-gated.landed
		if rep.Err != nil {
			t.Fatal(rep.Err)
		}
		return rep.TTL
	}

	g := take("k", "a")
	v := renew("k", "a")
	// The heal lands after the renewal returned, so what it gives the key
	// is within the validity told, but for a millisecond: the node reads
	// its clock in whole milliseconds.
	if ttl := land(); ttl <= 0 || ttl > v+time.Millisecond {
		t.Fatalf("heal gave node 0 %v, validity told %v", ttl, v)
	}
	if !holdsWith(t, servers[0].Addr(), "k", "a", g.Fence) {
		t.Fatal("node 0 not healed")
	}

	take("s", "a")
	renew("s", "a")
	if err := raw.Set(ctx, "s", "x", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if ttl := land(); ttl != 0 {
		t.Fatalf("heal over another token's key: %v", ttl)
	}
	if v, err := raw.Get(ctx, "s").Result(); err != nil || v != "x" {
		t.Fatalf("node 0's s: %q %v, want another holder's x", v, err)
	}

	take("h", "a")
	renew("h", "a")
	if err := raw.HSet(ctx, "h", "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if ttl := land(); ttl != 0 {
		t.Fatalf("heal over a hash: %v", ttl)
	}
	if v, err := raw.HGet(ctx, "h", "x").Result(); err != nil || v != "1" {
		t.Fatalf("node 0's hash h: %q %v", v, err)
	}

	take("u", "a")
	renew("u", "a")
	if ok, err := r.Release(ctx, "u", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	eventually(t, testTimeout, "the release reached node 0", func() bool {
		n, err := raw.Exists(ctx, DefaultPrefix+"released:u").Result()
		return err == nil && n == 1
	})
	if ttl := land(); ttl != 0 {
		t.Fatalf("heal after the release took the key again for %v", ttl)
	}
	if n, err := raw.Exists(ctx, "u").Result(); err != nil || n != 0 {
		t.Fatalf("node 0 holds u after its release: %d %v", n, err)
	}

	// Holders that disagree on the fence, or on the attempt, heal nothing.
	close(gated.gate) // from now on a heal is not held: Close below waits for any
	raw2 := rawClient(t, servers[2].Addr())
	gf := take("f", "a")
	setMeta(t, raw2, "f", "fence", strconv.FormatInt(gf.Fence+1, 10))
	take("t", "a")
	setMeta(t, raw2, "t", "attempt", "another")
	for _, key := range []string{"f", "t"} {
		if _, err := r.Extend(ctx, key, "a", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	r.Close() // waits for the heals it started
	select {
	case op := <-gated.pending:
		t.Fatalf("a heal of %s from holders that disagree", op.Key)
	default:
	}
}

// TestRenewalLeavesNoGoroutineForItsLateAnswer: a renewal decided before
// its last node answered leaves no goroutine waiting for that answer (it
// is read by the node's reader, which heals from it if it found the key
// free); only a heal to send gets a goroutine.
func TestRenewalLeavesNoGoroutineForItsLateAnswer(t *testing.T) {
	_, gated, r := extendGated(t)
	ctx := testCtx(t)
	g, err := r.Acquire(ctx, "renewed", hold("a", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Extend(ctx, "renewed", g.Token, 5*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	<-gated.pending
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "quorum.(*Redlock).heal") {
		t.Errorf("a goroutine waits in heal for the renewal's late answer")
	}
	gated.gate <- struct{}{}
	if rep := <-gated.landed; rep.Err != nil || rep.TTL <= 0 {
		t.Fatalf("the late renewal: %+v", rep)
	}
}

// gatedRedlock is a Redlock with cfg over servers whose node i holds
// every op of kind at its gate.
func gatedRedlock(t *testing.T, servers []*redistest.Server, i int, kind quorum.OpKind, cfg quorum.Config) (*gatedNode, *quorum.Redlock) {
	t.Helper()
	gated := newGate(kind, "")
	nodes := make([]quorum.Node, len(servers))
	for j, s := range servers {
		nodes[j] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	gated.Node = nodes[i]
	nodes[i] = gated
	r := quorum.New(nodes, cfg)
	t.Cleanup(func() { r.Close() })
	return gated, r
}

// extendGated is a Redlock over three redis-servers whose node 2 holds
// every extension at its gate.
func extendGated(t *testing.T) ([]*redistest.Server, *gatedNode, *quorum.Redlock) {
	t.Helper()
	servers := redistest.StartN(t, 3, redistest.Options{})
	gated, r := gatedRedlock(t, servers, 2, quorum.OpExtend, quorum.Config{})
	return servers, gated, r
}
