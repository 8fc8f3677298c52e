package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// newZK connects a ZooKeeper backend to servers, waits for its session and
// closes it when the test ends.
func newZK(t *testing.T, servers []string, o Options) *ZooKeeper {
	t.Helper()
	o.Servers = servers
	log := zap.NewNop()
	z, err := New(o, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	eventually(t, 10*time.Second, "zookeeper session", z.Connected)
	return z
}

// rawZK is a plain go-zookeeper client, to look at the nodes behind the
// backend.
func rawZK(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogger(zkLogger{log: zap.NewNop()}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// lockNodes are the names of key's lock nodes on the server.
func lockNodes(t *testing.T, c *zk.Conn, key string) []string {
	t.Helper()
	names, _, err := c.Children(DefaultRoot + "/" + encodeKey(key))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return names
}

// waitHold is a hold for a client that waits (LOCK ... WAIT).
func waitHold(token string, ttl time.Duration) engine.Hold {
	h := hold(token, ttl)
	h.Waiter = &engine.Waiter{ID: token, Since: time.Now(), Keep: time.Minute}
	return h
}

// releases is the engine.Events a test hands the backend: it counts
// Released calls by key and records Lost locks.
type releases struct {
	mu   sync.Mutex
	n    map[string]int
	lost []zkLock
}

var _ engine.Events = (*releases)(nil)

func (r *releases) Released(key, _ string) { r.add(key) }

func (r *releases) Lost(key, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, zkLock{key, token})
}

func (r *releases) lostLocks() []zkLock {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lost)
}

func (r *releases) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[key]++
}

func (r *releases) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[key]
}

func mustGrant(t *testing.T, z *ZooKeeper, key string, h engine.Hold) engine.Grant {
	t.Helper()
	g, err := z.Acquire(testCtx(t), key, h)
	if err != nil {
		t.Fatalf("acquire %s for %s: %v", key, h.Token, err)
	}
	if g.Token != h.Token || g.Fence <= 0 || g.Validity <= 0 || g.Validity > h.TTL {
		t.Fatalf("acquire %s for %s: grant %+v", key, h.Token, g)
	}
	return g
}

// mustBusy checks that an acquire is refused, and returns its RetryAfter.
func mustBusy(t *testing.T, z *ZooKeeper, key string, h engine.Hold) time.Duration {
	t.Helper()
	g, err := z.Acquire(testCtx(t), key, h)
	var busy *engine.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("acquire %s for %s: %+v, %v; want a BusyError", key, h.Token, g, err)
	}
	return busy.RetryAfter
}

func zkRelease(t *testing.T, z *ZooKeeper, key, token string, want bool) {
	t.Helper()
	if ok, err := z.Release(testCtx(t), key, token, nil, nil); ok != want || err != nil {
		t.Fatalf("release %s by %s: %v, %v; want %v", key, token, ok, err, want)
	}
}

func TestZooKeeperAcquireRelease(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	b := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	ctx, key := testCtx(t), "acquire"

	g := mustGrant(t, a, key, hold("t1", 10*time.Second))
	if g.Validity < 9*time.Second {
		t.Fatalf("validity %v of a 10s lease", g.Validity)
	}
	for _, z := range []*ZooKeeper{a, b} { // the other token, through either instance
		// The other instance allows for drift, from when it first saw the lease.
		if after := mustBusy(t, z, key, hold("t2", time.Second)); after < 8*time.Second || after > 10*time.Second+drift(10*time.Second) {
			t.Fatalf("RetryAfter %v, want the holder's lease left", after)
		}
	}
	if n := lockNodes(t, raw, key); len(n) != 1 {
		t.Fatalf("refused acquires left nodes: %v", n)
	}

	// An idempotent retry, through either instance, keeps the fence and
	// takes the new lease; SET NX (Fresh) refuses the same token.
	for _, z := range []*ZooKeeper{a, b} {
		again := mustGrant(t, z, key, hold("t1", 20*time.Second))
		if again.Fence != g.Fence || again.Validity < 19*time.Second {
			t.Fatalf("retry: %+v, first %+v", again, g)
		}
	}
	fresh := hold("t1", time.Second)
	fresh.Fresh = true
	mustBusy(t, b, key, fresh)
	if n := lockNodes(t, raw, key); len(n) != 1 {
		t.Fatalf("retries left nodes: %v", n)
	}

	h, ok, err := b.Inspect(ctx, key)
	if !ok || err != nil || h.Token != "t1" || h.Fence != g.Fence || h.Mode != engine.Lease || h.Name != "client-t1" ||
		h.Validity < 19*time.Second || h.Validity > 20*time.Second {
		t.Fatalf("inspect: %+v, %v, %v", h, ok, err)
	}

	zkRelease(t, a, key, "t2", false) // not the holder
	zkRelease(t, b, key, "t1", true)  // the holder, from another instance
	zkRelease(t, a, key, "t1", false)
	if _, ok, err := a.Inspect(ctx, key); ok || err != nil {
		t.Fatalf("inspect after release: %v, %v", ok, err)
	}
	if next := mustGrant(t, b, key, hold("t2", time.Second)); next.Fence <= g.Fence {
		t.Fatalf("fence %d after %d", next.Fence, g.Fence)
	}
}

func TestZooKeeperExtend(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	b := newZK(t, []string{srv.Addr()}, Options{})
	ctx := testCtx(t)

	// A validity counts from the call that set it: at most its TTL, at
	// least the TTL less the time since the call began.
	within := func(v, ttl time.Duration, since time.Time) bool {
		return v <= ttl && v >= ttl-time.Since(since)
	}
	mustGrant(t, a, "lease", hold("t1", 2*time.Second))
	start := time.Now()
	if v, err := b.Extend(ctx, "lease", "t1", 0, ""); err != nil || !within(v, 2*time.Second, start) {
		t.Fatalf("extend with ttl 0: %v, %v (call took %v); want the stored 2s", v, err, time.Since(start))
	}
	start = time.Now()
	if v, err := b.Extend(ctx, "lease", "t1", 5*time.Second, ""); err != nil || !within(v, 5*time.Second, start) {
		t.Fatalf("extend to 5s: %v, %v (call took %v)", v, err, time.Since(start))
	}
	if h, _, _ := a.Inspect(ctx, "lease"); !within(h.Validity, 5*time.Second, start) || h.Mode != engine.Lease {
		t.Fatalf("inspect after extend: %+v (%v since the extend began)", h, time.Since(start))
	}
	if _, err := a.Extend(ctx, "lease", "t1", 0, engine.Bound); !errors.Is(err, engine.ErrNotBound) {
		t.Fatalf("watchdog renewal of a lease: %v, want ErrNotBound", err)
	}
	if _, err := a.Extend(ctx, "lease", "t2", time.Second, ""); !errors.Is(err, engine.ErrNotHeld) {
		t.Fatalf("extend by another token: %v", err)
	}
	if _, err := a.Extend(ctx, "nothing", "t1", time.Second, ""); !errors.Is(err, engine.ErrNotHeld) {
		t.Fatalf("extend of a free key: %v", err)
	}

	bound := hold("t3", 2*time.Second)
	bound.Mode = engine.Bound
	mustGrant(t, a, "bound", bound)
	start = time.Now()
	if v, err := a.Extend(ctx, "bound", "t3", 3*time.Second, engine.Bound); err != nil || !within(v, 3*time.Second, start) {
		t.Fatalf("watchdog renewal: %v, %v (call took %v)", v, err, time.Since(start))
	}
	start = time.Now()
	if _, err := b.Extend(ctx, "bound", "t3", 4*time.Second, engine.Lease); err != nil { // EXPIRE
		t.Fatal(err)
	}
	if _, err := a.Extend(ctx, "bound", "t3", 3*time.Second, engine.Bound); !errors.Is(err, engine.ErrNotBound) {
		t.Fatalf("watchdog renewal after EXPIRE: %v", err)
	}
	if h, _, _ := a.Inspect(ctx, "bound"); h.Mode != engine.Lease || !within(h.Validity, 4*time.Second, start) {
		t.Fatalf("inspect: %+v (%v since the EXPIRE began)", h, time.Since(start))
	}
}

func TestZooKeeperLeave(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	ctx, key := testCtx(t), "leave"

	mustGrant(t, a, key, hold("holder", 10*time.Second))
	mustBusy(t, a, key, waitHold("w1", time.Second))
	mustBusy(t, a, key, waitHold("w1", time.Second)) // the same place again
	if n := lockNodes(t, raw, key); len(n) != 2 || !strings.HasPrefix(n[0]+n[1], placePrefix("w1")) && !strings.HasPrefix(n[1], placePrefix("w1")) {
		t.Fatalf("nodes %v: want the holder and w1's one place", n)
	}
	if err := a.Leave(ctx, key, "w1"); err != nil {
		t.Fatal(err)
	}
	if n := lockNodes(t, raw, key); len(n) != 1 {
		t.Fatalf("nodes after leave: %v", n)
	}

	// A place that became the lock is not left.
	mustBusy(t, a, key, waitHold("w2", time.Second))
	zkRelease(t, a, key, "holder", true)
	mustGrant(t, a, key, waitHold("w2", time.Second))
	if err := a.Leave(ctx, key, "w2"); err != nil {
		t.Fatal(err)
	}
	if h, ok, _ := a.Inspect(ctx, key); !ok || h.Token != "w2" {
		t.Fatalf("leave took the lock: %+v, %v", h, ok)
	}
}

// TestZooKeeperFencesIncrease: fences strictly increase over grants
// through two instances, each with its own session, on one key.
func TestZooKeeperFencesIncrease(t *testing.T) {
	srv := zktest.Start(t)
	zs := []*ZooKeeper{newZK(t, []string{srv.Addr()}, Options{}), newZK(t, []string{srv.Addr()}, Options{})}
	var last int64
	for i := range 30 {
		z := zs[i%2]
		token := "t" + string(rune('a'+i%26))
		h := hold(token, time.Second)
		if i%3 == 0 {
			h = waitHold(token, time.Second)
		}
		g := mustGrant(t, z, "fence", h)
		if g.Fence <= last {
			t.Fatalf("grant %d: fence %d after %d", i, g.Fence, last)
		}
		last = g.Fence
		zkRelease(t, zs[(i+1)%2], "fence", token, true)
	}
}

// TestZooKeeperWaitersNoHerd: five waiters in line, each through its own
// instance (as each instance's first waiter is); each release wakes
// (OnRelease) only the instance of the waiter right behind the holder,
// once, and the key goes to the waiters in the order they came. Changes
// of the holder's data (extensions) wake nobody.
func TestZooKeeperWaitersNoHerd(t *testing.T) {
	srv := zktest.Start(t)
	b := newZK(t, []string{srv.Addr()}, Options{})
	ctx, key := testCtx(t), "herd"
	mustGrant(t, b, key, hold("holder", 10*time.Second))

	const n = 5
	var woken [n]releases
	var zs [n]*ZooKeeper
	var line [n]engine.Hold
	for i := range n {
		zs[i] = newZK(t, []string{srv.Addr()}, Options{Events: &woken[i]})
		line[i] = waitHold("w"+string(rune('1'+i)), 5*time.Second)
		mustBusy(t, zs[i], key, line[i])
	}
	wakes := func() (all []int) {
		for i := range n {
			all = append(all, woken[i].count(key))
		}
		return all
	}
	for range 3 {
		if _, err := b.Extend(ctx, key, "holder", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a wake, if any, would arrive
	if w := wakes(); slices.Max(w) != 0 {
		t.Fatalf("extensions of the holder woke waiters: %v", w)
	}

	zkRelease(t, b, key, "holder", true)
	for i := range n {
		eventually(t, 5*time.Second, "the next waiter woken", func() bool { return woken[i].count(key) == 1 })
		for j := n - 1; j > i; j-- { // those behind try first: refused
			mustBusy(t, zs[j], key, line[j])
		}
		g := mustGrant(t, zs[i], key, line[i])
		time.Sleep(50 * time.Millisecond) // a herd, if any, would arrive
		// One wake for each waiter served so far, none for the others.
		for j, c := range wakes() {
			if served := j <= i; served && c != 1 || !served && c != 0 {
				t.Fatalf("after release %d, wakes by waiter: %v", i+1, wakes())
			}
		}
		zkRelease(t, zs[(i+1)%n], key, g.Token, true)
	}
	if w := wakes(); slices.Min(w) != 1 || slices.Max(w) != 1 {
		t.Fatalf("%d releases woke waiters %v times", n, w)
	}
}

// TestZooKeeperNextWaiterQueued: a grant puts the instance's next waiter
// (Hold.Next) in line, so that a release through another instance wakes it.
func TestZooKeeperNextWaiterQueued(t *testing.T) {
	srv := zktest.Start(t)
	var woken releases
	a := newZK(t, []string{srv.Addr()}, Options{Events: &woken})
	b := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	key := "next"

	first, next := waitHold("first", 5*time.Second), waitHold("next", 5*time.Second)
	first.Next = next.Waiter
	mustGrant(t, a, key, first)
	eventually(t, 5*time.Second, "next waiter in line", func() bool {
		n := lockNodes(t, raw, key)
		return len(n) == 2 && (strings.HasPrefix(n[0], placePrefix("next")) || strings.HasPrefix(n[1], placePrefix("next")))
	})
	zkRelease(t, b, key, "first", true)
	eventually(t, 5*time.Second, "next waiter woken", func() bool { return woken.count(key) == 1 })
	mustGrant(t, a, key, next)
	if n := lockNodes(t, raw, key); len(n) != 1 {
		t.Fatalf("nodes %v: want the next waiter's place, now the lock", n)
	}
}

// TestZooKeeperLeaseExpiry: the instance that took a lease deletes it when
// it runs out, and respects an extension made through another instance.
func TestZooKeeperLeaseExpiry(t *testing.T) {
	srv := zktest.Start(t)
	var woken releases
	a := newZK(t, []string{srv.Addr()}, Options{Events: &woken})
	b := newZK(t, []string{srv.Addr()}, Options{})
	ctx, key := testCtx(t), "lease"
	held := func() bool { // each look has its own ctx: the test outlives testCtx's
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
		defer cancel()
		_, ok, err := b.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("inspect: %v", err)
		}
		return ok
	}

	// Every bound below comes from clocks read around the calls: a lease
	// starts after its acquire began, so it cannot end before start+lease,
	// and it must still be held by a look that began before then. Leases
	// end by the wall clock in whole milliseconds (ExpiresAt), so the clocks
	// here are wall clocks (Round(0)), and a lease may end up to 1ms early.
	const lease = 2 * time.Second
	start := wall()
	mustGrant(t, a, key, hold("t1", lease))
	if looked := wall(); !held() && looked.Before(start.Add(lease)) {
		t.Fatalf("not held %v after the acquire began", looked.Sub(start))
	}
	eventually(t, 20*time.Second, "lease deleted", func() bool { return !held() })
	if d := wall().Sub(start); d < lease-time.Millisecond {
		t.Fatalf("a %v lease ended after %v", lease, d)
	}
	t.Logf("%v lease deleted after %v", lease, wall().Sub(start))
	eventually(t, 10*time.Second, "the owner's expiry wakes local waiters", func() bool { return woken.count(key) == 1 })

	// Another instance extends the lease; its owner must not end it at the
	// first deadline. The extension is long, so that the look past the first
	// deadline comes before the extended one even on a busy machine.
	const extended = 8 * time.Second
	start = wall()
	mustGrant(t, a, key, hold("t2", lease))
	extendedAt := wall()
	if _, err := b.Extend(ctx, key, "t2", extended, ""); err != nil {
		t.Fatalf("extend %v after the acquire began: %v", wall().Sub(start), err)
	}
	time.Sleep(start.Add(lease + time.Second).Sub(wall())) // past the first deadline
	if looked := wall(); !held() && looked.Before(extendedAt.Add(extended)) {
		t.Fatalf("the owner ended a lease that another instance had extended (looked %v after the extend)", looked.Sub(extendedAt))
	}
	eventually(t, 30*time.Second, "extended lease deleted", func() bool { return !held() })
	if d := wall().Sub(extendedAt); d < extended-time.Millisecond {
		t.Fatalf("a lease extended to %v ended after %v", extended, d)
	}
	t.Logf("extended lease deleted %v after the extend", wall().Sub(extendedAt))
}

// wall is the wall clock without its monotonic reading.
func wall() time.Time { return time.Now().Round(0) }

// TestZooKeeperOrphans: a node whose acquire does not answer — its ctx
// ended right after the create — is deleted, for a try and for a waiter,
// whether the caller heard of the create or gave up before.
func TestZooKeeperOrphans(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	var mu sync.Mutex
	var cancel context.CancelFunc
	cancelNow := func(string) {
		mu.Lock()
		defer mu.Unlock()
		cancel()
	}
	for i := range 20 {
		ctx, stop := context.WithCancel(testCtx(t))
		mu.Lock()
		cancel = stop
		mu.Unlock()
		h := hold("t", time.Second)
		if i%2 == 1 {
			h = waitHold("w", time.Second)
		}
		if i%4 < 2 {
			a.afterCreate, a.createReturned = cancelNow, nil // the caller has the node
		} else {
			a.afterCreate, a.createReturned = nil, cancelNow // the caller gives up on the create
		}
		if g, err := a.Acquire(ctx, "orphan", h); !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire %d: %+v, %v; want context.Canceled", i, g, err)
		}
		eventually(t, 5*time.Second, "no node left", func() bool { return len(lockNodes(t, raw, "orphan")) == 0 })
	}
	a.afterCreate, a.createReturned = nil, nil
	mustGrant(t, a, "orphan", hold("t", time.Second))

	ctx, stop := context.WithCancel(testCtx(t))
	stop()
	if _, err := a.Acquire(ctx, "ended", hold("t", time.Second)); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with an ended ctx: %v", err)
	}
	if n := lockNodes(t, raw, "ended"); len(n) != 0 {
		t.Fatalf("nodes %v", n)
	}
}

// TestZooKeeperKeysOnServer: keys that are not valid path segments as they
// are work as locks, and ZooKeeper's node names decode back to them; the
// root holds nothing else but the marks directory.
func TestZooKeeperKeysOnServer(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	keys := []string{"/", ".", "..", "%", "a/../b", "\x00\xff", "é", "\uf000", "zookeeper", strings.Repeat("/", 1024)}
	for _, key := range keys {
		mustGrant(t, a, key, hold("t", 10*time.Second))
		if h, ok, err := a.Inspect(testCtx(t), key); !ok || err != nil || h.Token != "t" {
			t.Fatalf("inspect %q: %+v, %v, %v", key, h, ok, err)
		}
	}
	names, _, err := raw.Children(DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	decoded := map[string]bool{}
	for _, n := range names {
		if n == marksName {
			continue // the marks of locks taken (held.go), never a key's name
		}
		key, err := decodeKey(n)
		if err != nil {
			t.Fatalf("node %q: %v", n, err)
		}
		decoded[key] = true
	}
	for _, key := range keys {
		if !decoded[key] {
			t.Errorf("no node for key %q among %v", key, names)
		}
	}
	if _, err := a.Acquire(testCtx(t), "", hold("t", time.Second)); err == nil {
		t.Error("an empty key was accepted")
	}
}

// TestZooKeeperCloseFreesLocks: Close ends the session, which frees its
// connection-bound locks at once (leases outlive it:
// TestZooKeeperLeaseOutlivesItsInstance), refuses further calls, and
// leaves no goroutine behind.
func TestZooKeeperCloseFreesLocks(t *testing.T) {
	srv := zktest.Start(t)
	b := newZK(t, []string{srv.Addr()}, Options{})
	if _, _, err := b.Inspect(testCtx(t), "close"); err != nil { // b's connection goroutines run
		t.Fatal(err)
	}
	before := countGoroutines()
	a := newZK(t, []string{srv.Addr()}, Options{})
	bound := hold("t1", time.Minute)
	bound.Mode = engine.Bound
	mustGrant(t, a, "close", bound)
	mustBusy(t, a, "close", waitHold("w", time.Minute))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, b, "close", hold("t2", time.Minute))
	if _, err := a.Acquire(testCtx(t), "close", hold("t1", time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for countGoroutines() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after close, %d before:\n%s", countGoroutines(), before, goroutineDump())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestZooKeeperWithoutSession: with no server to reach, calls are refused
// at once, and bad options are refused.
func TestZooKeeperWithoutSession(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	z, err := New(Options{Servers: []string{addr}}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	start := time.Now()
	if _, err := z.Acquire(testCtx(t), "k", hold("t", time.Second)); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("acquire without a session: %v", err)
	}
	if _, err := z.Release(testCtx(t), "k", "t", nil, nil); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("release without a session: %v", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("refusals took %v", d)
	}
	for _, o := range []Options{{}, {Servers: []string{addr}, Root: "/"}, {Servers: []string{addr}, Root: "relative"}, {Servers: []string{addr}, Root: "/a//b"}} {
		if _, err := New(o, zap.NewNop()); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// TestZooKeeperFreeKeyTakesTwoRequests checks the requests of a lock and
// unlock of a free key: the create, which says the node is the only one
// and so the lock, and the delete; ZooKeeper's recipe takes three (it
// lists the children after its create).
func TestZooKeeperFreeKeyTakesTwoRequests(t *testing.T) {
	// The server's removal of emptied containers (every 0.2 s in tests)
	// would cost a cycle two more requests whenever it lands between two
	// cycles, which on a busy machine is every cycle: this server checks
	// once a minute.
	check := zktest.ContainerCheck
	zktest.ContainerCheck = time.Minute
	srv := zktest.Start(t)
	zktest.ContainerCheck = check
	z := newZK(t, []string{srv.Addr()}, Options{})
	ctx, key := testCtx(t), "two-requests"
	received := func() int { return packetsReceived(t, srv.Addr()) }
	eventually(t, 10*time.Second, "the marks watched", z.marksWatched.Load) // its requests done
	if first, second := received(), received(); second-first != 1 {
		t.Fatalf("mntr counted %d packets of its own, want 1", second-first)
	}
	const cycles = 20
	var each []int
	for range cycles {
		before := received()
		mustGrant(t, z, key, hold("t1", 10*time.Second))
		if ok, err := z.Release(ctx, key, "t1", nil, nil); !ok || err != nil {
			t.Fatalf("release: %v, %v", ok, err)
		}
		each = append(each, received()-before-1) // the mntr itself counts
	}
	// A ping may land in a cycle too.
	slices.Sort(each)
	if each[cycles/2] != 2 {
		t.Fatalf("requests per cycle, sorted: %v; want a median of 2", each)
	}
}

// packetsReceived is the server's count of requests received; the "mntr"
// that reads it counts as one.
func packetsReceived(t *testing.T, addr string) int {
	t.Helper()
	m, err := zktest.Mntr(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(m["zk_packets_received"])
	if err != nil {
		t.Fatalf("zk_packets_received in mntr: %v", err)
	}
	return n
}

// TestZooKeeperBatchesUnderLoad: many clients locking and unlocking their
// own keys at once through one instance are all served, with fences that
// increase per key, in fewer requests than calls: the creates and deletes
// that pile up go in one multi.
func TestZooKeeperBatchesUnderLoad(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	const clients, cycles = 32, 20
	before := packetsReceived(t, srv.Addr())
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			ctx, key := context.Background(), fmt.Sprintf("load-%d", c)
			var last int64
			for range cycles {
				g, err := z.Acquire(ctx, key, hold("t", 10*time.Second))
				if err != nil {
					errs <- fmt.Errorf("%s: acquire: %w", key, err)
					return
				}
				if g.Fence <= last {
					errs <- fmt.Errorf("%s: fence %d after %d", key, g.Fence, last)
					return
				}
				last = g.Fence
				if ok, err := z.Release(ctx, key, "t", nil, nil); !ok || err != nil {
					errs <- fmt.Errorf("%s: release: %v %w", key, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	calls := clients * cycles * 2
	if requests := packetsReceived(t, srv.Addr()) - before - 1; requests >= calls {
		t.Fatalf("%d requests for %d acquires and releases: nothing was batched", requests, calls)
	} else {
		t.Logf("%d requests for %d acquires and releases", requests, calls)
	}
}

// TestZooKeeperServedWaiterKeepsNoPlace: a place made on a waiter's behalf
// (a grant's next waiter is put in line in the background) after the
// waiter got the key is not left in line, where it would hold up the
// waiters behind it until its keep ran out. Under load, that background
// step came after the waiter's own claim, and a line of eight waiters
// stood still for the whole keep (2 s) about once every few thousand grants.
func TestZooKeeperServedWaiterKeepsNoPlace(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	key := "served"

	for _, mode := range []engine.Mode{engine.Lease, engine.Bound} {
		w := waitHold("w-"+string(mode), 5*time.Second)
		w.Mode = mode
		mustGrant(t, a, key, w)
		a.queue(key, *w.Waiter) // late: the waiter holds the key already
		if n := lockNodes(t, raw, key); len(n) != 1 {
			t.Fatalf("%s: nodes %v: want the waiter's lock alone", mode, n)
		}
		zkRelease(t, a, key, w.Token, true)
		a.queue(key, *w.Waiter) // later still: the waiter came and went
		if n := lockNodes(t, raw, key); len(n) != 0 {
			t.Fatalf("%s: nodes %v after the release: want none", mode, n)
		}
		// The next waiter is not held up behind a place nobody takes.
		mustGrant(t, a, key, waitHold("x-"+string(mode), 5*time.Second))
		zkRelease(t, a, key, "x-"+string(mode), true)
	}

	// A waiter with the same token that waits again is put in line again.
	w := waitHold("again", 5*time.Second)
	mustGrant(t, a, key, w)
	zkRelease(t, a, key, "again", true)
	mustGrant(t, a, key, hold("holder", 5*time.Second))
	mustBusy(t, a, key, w) // its own call: it waits again
	a.queue(key, *w.Waiter)
	if n := lockNodes(t, raw, key); len(n) != 2 {
		t.Fatalf("nodes %v: want the holder's lock and the waiter's place", n)
	}
}

// TestZooKeeperServedWaiterOtherPlaceDropped: when a waiter gets the key
// through another node than the place this instance kept for it (a place
// made on its behalf that raced its own), that place is deleted.
func TestZooKeeperServedWaiterOtherPlaceDropped(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	key := "other-place"

	// The other place, as the race leaves it: a node at version 0, known
	// to this instance as the waiter's place.
	if _, err := raw.Create(DefaultRoot+"-orphan", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	orphan, err := raw.Create(DefaultRoot+"-orphan/"+placePrefix("w"), nil, zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	a.keepPlace(key, "w", orphan, time.Minute, placeFacts{}, false)

	mustGrant(t, a, key, waitHold("w", 5*time.Second))
	eventually(t, 5*time.Second, "the other place deleted", func() bool {
		ok, _, err := raw.Exists(orphan)
		return err == nil && !ok
	})
}

// TestZooKeeperQueueLeavesTheWaitersLock: when the waiter takes the place
// that queue just made for it as its lock (a connection-bound lock keeps
// the place's node), queue, finding it served, leaves that node alone.
func TestZooKeeperQueueLeavesTheWaitersLock(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	key := "queue-race"

	w := waitHold("w", 5*time.Second)
	w.Mode = engine.Bound
	var once sync.Once
	a.afterCreate = func(p string) {
		// queue's create returned: the waiter's own try comes first.
		once.Do(func() { mustGrant(t, a, key, w) })
	}
	a.queue(key, *w.Waiter)
	if h, ok, err := a.Inspect(testCtx(t), key); err != nil || !ok || h.Token != "w" {
		t.Fatalf("after queue: holder %+v, %v, %v; want w", h, ok, err)
	}
	if n := lockNodes(t, raw, key); len(n) != 1 {
		t.Fatalf("nodes %v: want the waiter's lock alone", n)
	}
}
