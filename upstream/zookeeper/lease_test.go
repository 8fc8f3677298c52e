package zookeeper

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// holders checks grants of one key for two holders at once: each grant
// is held from the moment its Acquire returned (it may have been made
// earlier, never later) until that moment plus its validity. A grant
// whose Acquire returned while another token's validity still ran
// overlaps it for sure; fences must grow with every grant.
type holders struct {
	mu     sync.Mutex
	grants []heldGrant
}

type heldGrant struct {
	token      string
	fence      int64
	from, till time.Time
}

// add records g, whose Acquire returned at returned.
func (h *holders) add(g engine.Grant, returned time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grants = append(h.grants, heldGrant{g.Token, g.Fence, returned, returned.Add(g.Validity)})
}

// violations are the pairs of grants that overlap, and the fences that
// did not grow, in the order the grants were added.
func (h *holders) violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var bad []string
	for i, later := range h.grants {
		for _, earlier := range h.grants[:i] {
			if later.token != earlier.token && later.from.Before(earlier.till) {
				bad = append(bad, fmt.Sprintf("%s granted %v before %s's validity ended", later.token, earlier.till.Sub(later.from), earlier.token))
			}
			if later.token != earlier.token && later.fence <= earlier.fence {
				bad = append(bad, fmt.Sprintf("fence %d of %s after %d of %s", later.fence, later.token, earlier.fence, earlier.token))
			}
		}
	}
	return bad
}

func (h *holders) check(t *testing.T) {
	t.Helper()
	for _, v := range h.violations() {
		t.Error(v)
	}
}

// TestHoldersCatchesOverlapsAndFences: the checker the fault tests rely on
// flags two holders at once and a fence that goes back, and nothing else.
func TestHoldersCatchesOverlapsAndFences(t *testing.T) {
	t0 := time.Now()
	var ok holders
	ok.add(engine.Grant{Token: "a", Fence: 1, Validity: time.Second}, t0)
	ok.add(engine.Grant{Token: "a", Fence: 1, Validity: time.Second}, t0.Add(500*time.Millisecond)) // a retry
	ok.add(engine.Grant{Token: "b", Fence: 2, Validity: time.Second}, t0.Add(1600*time.Millisecond))
	if v := ok.violations(); len(v) != 0 {
		t.Fatalf("sound grants flagged: %v", v)
	}
	var overlap holders
	overlap.add(engine.Grant{Token: "a", Fence: 1, Validity: time.Second}, t0)
	overlap.add(engine.Grant{Token: "b", Fence: 2, Validity: time.Second}, t0.Add(999*time.Millisecond))
	if v := overlap.violations(); len(v) != 1 {
		t.Fatalf("overlap: %v", v)
	}
	var back holders
	back.add(engine.Grant{Token: "a", Fence: 5, Validity: time.Second}, t0)
	back.add(engine.Grant{Token: "b", Fence: 4, Validity: time.Second}, t0.Add(2*time.Second))
	if v := back.violations(); len(v) != 1 {
		t.Fatalf("fence back: %v", v)
	}
}

// TestZooKeeperLeaseOutlivesItsInstance: a lease granted through instance
// A lives its whole validity after A is gone — closed without releasing,
// or cut off from ZooKeeper until its session expires — and no longer:
// instance B refuses the key until the lease's end, then ends the lease
// itself and grants the key; a waiter on B is woken when the lease ends.
func TestZooKeeperLeaseOutlivesItsInstance(t *testing.T) {
	for _, gone := range []string{"closed", "partitioned"} {
		t.Run(gone, func(t *testing.T) {
			srv := zktest.Start(t)
			proxy := zktest.NewProxy(t, srv.Addr())
			a := newZK(t, []string{proxy.Addr()}, Options{SessionTimeout: time.Second})
			var events releases
			b := newZK(t, []string{srv.Addr()}, Options{Events: &events})
			raw := rawZK(t, srv.Addr())
			const ttl = 6 * time.Second
			var polled, waited holders

			// Two leases through A: one that B polls for, one a waiter on B
			// waits for.
			g := mustGrant(t, a, "polled", hold("a1", ttl))
			polled.add(g, time.Now())
			g = mustGrant(t, a, "waited", hold("a2", ttl))
			waitedEnd := time.Now().Add(g.Validity)
			waited.add(g, time.Now())
			mustBusy(t, b, "waited", waitHold("w", ttl))

			switch gone {
			case "closed":
				a.Close()
			case "partitioned":
				proxy.Cut()
				// A's session expires 1s after the server last heard from it;
				// its ephemeral nodes go then. Wait well past that.
				eventually(t, 10*time.Second, "A disconnected", func() bool { return !a.Connected() })
				time.Sleep(2 * time.Second)
			}

			// B refuses the key while the lease lasts, then grants it.
			deadline := time.Now().Add(2*ttl + 20*time.Second)
			for i := 0; ; i++ {
				if i > 5000 || time.Now().After(deadline) {
					t.Fatalf("B never granted the polled key; nodes %v", lockNodes(t, raw, "polled"))
				}
				g, err := b.Acquire(testCtx(t), "polled", hold("b1", ttl))
				if err == nil {
					polled.add(g, time.Now())
					break
				}
				if !errors.Is(err, engine.ErrNotAcquired) {
					t.Fatalf("poll: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			polled.check(t)

			// The waiter is woken (Events.Released) once the lease is over,
			// by B's own timer: A is gone and nobody else deletes the node.
			eventually(t, ttl+20*time.Second, "waiter woken", func() bool { return events.count("waited") > 0 })
			woken := time.Now()
			g, err := b.Acquire(testCtx(t), "waited", waitHold("w", ttl))
			if err != nil {
				t.Fatalf("woken waiter: %v; nodes %v", err, lockNodes(t, raw, "waited"))
			}
			waited.add(g, time.Now())
			waited.check(t)
			// Woken at the lease's end, not at a retry much later: B saw the
			// lease as it was granted, and allows for drift from then, plus
			// a margin for a busy machine.
			if late := woken.Sub(waitedEnd); late > drift(ttl)+5*time.Second {
				t.Errorf("waiter woken %v after the lease's end", late)
			}
		})
	}
}

// TestZooKeeperBoundLockEndsWithItsSession: a connection-bound lock is
// not a lease: it goes when the session of the instance that granted it
// ends, and another instance takes the key at once.
func TestZooKeeperBoundLockEndsWithItsSession(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	b := newZK(t, []string{srv.Addr()}, Options{})
	bound := hold("a1", time.Minute)
	bound.Mode = engine.Bound
	mustGrant(t, a, "bound", bound)
	mustBusy(t, b, "bound", hold("b1", time.Minute))
	a.Close()
	eventually(t, 10*time.Second, "bound lock gone with A's session", func() bool {
		_, held, err := b.Inspect(testCtx(t), "bound")
		return err == nil && !held
	})
	mustGrant(t, b, "bound", hold("b1", time.Minute))
}

// TestZooKeeperSessionTimeoutBoundsValidity: the session timeout the
// ensemble grants is logged, a capped one as a warning; a
// connection-bound lock is never reported valid for longer (its node ends
// with the session), while a lease is valid for its whole ttl.
func TestZooKeeperSessionTimeoutBoundsValidity(t *testing.T) {
	srv := zktest.Start(t) // maxSessionTimeout 20s
	core, logs := observer.New(zapcore.InfoLevel)
	z, err := New(Options{Servers: []string{srv.Addr()}, SessionTimeout: 30 * time.Second}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	eventually(t, 10*time.Second, "session", z.Connected)

	capped := logs.FilterField(zap.Duration("negotiated", 20*time.Second)).FilterField(zap.Duration("requested", 30*time.Second)).All()
	if len(capped) != 1 || capped[0].Level != zapcore.WarnLevel {
		t.Fatalf("negotiated timeout logged as %+v; all logs %+v", capped, logs.All())
	}

	bound := hold("b", time.Minute)
	bound.Mode = engine.Bound
	if g := mustGrant(t, z, "bound", bound); g.Validity > 20*time.Second {
		t.Fatalf("bound lock valid for %v, beyond the 20s session timeout", g.Validity)
	}
	if v, err := z.Extend(testCtx(t), "bound", "b", time.Minute, engine.Bound); err != nil || v > 20*time.Second {
		t.Fatalf("bound lock renewed for %v, %v", v, err)
	}
	if h, _, err := z.Inspect(testCtx(t), "bound"); err != nil || h.Validity > 20*time.Second {
		t.Fatalf("bound lock inspected: %+v, %v", h, err)
	}
	if g := mustGrant(t, z, "lease", hold("l", time.Minute)); g.Validity <= 50*time.Second {
		t.Fatalf("lease valid for %v of a minute", g.Validity)
	}

	// A timeout granted as asked is logged at info level.
	core, logs = observer.New(zapcore.InfoLevel)
	asked, err := New(Options{Servers: []string{srv.Addr()}, SessionTimeout: 2 * time.Second}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { asked.Close() })
	eventually(t, 10*time.Second, "session", asked.Connected)
	if got := logs.FilterField(zap.Duration("negotiated", 2*time.Second)).All(); len(got) != 1 || got[0].Level != zapcore.InfoLevel {
		t.Fatalf("negotiated timeout logged as %+v", got)
	}
}

// leaseNode checks that key's lowest node, held by token, is a lease's
// persistent node, and returns its path.
func leaseNode(t *testing.T, raw *zk.Conn, key, token string) string {
	t.Helper()
	kids := parseChildren(lockNodes(t, raw, key))
	if len(kids) == 0 {
		t.Fatalf("%s: no lock node", key)
	}
	p := DefaultRoot + "/" + encodeKey(key) + "/" + kids[0].name
	b, stat, err := raw.Get(p)
	if err != nil {
		t.Fatal(err)
	}
	if stat.EphemeralOwner != 0 || !strings.Contains(string(b), `"token":"`+token+`"`) || !strings.Contains(string(b), `"mode":"lease"`) {
		t.Fatalf("%s: lowest node %s owned by session %x holds %s; want %s's lease, persistent", key, p, stat.EphemeralOwner, b, token)
	}
	return p
}

// TestZooKeeperEveryLeaseIsPersistent: however a lease is granted — tried
// once, claimed by a waiter whose place is lowest, handed to a waiter by a
// release, or made of a connection-bound lock by an extension with mode
// Lease (EXPIRE) — its node is persistent, keeps its fence and its place
// in line, and outlives the instance: another instance refuses the key
// after the granting one closed.
func TestZooKeeperEveryLeaseIsPersistent(t *testing.T) {
	srv := zktest.Start(t)
	a := newZK(t, []string{srv.Addr()}, Options{})
	b := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	ctx := testCtx(t)

	// Claimed: the waiter's place is lowest once the holder released.
	first := mustGrant(t, a, "claimed", hold("h1", time.Minute))
	mustBusy(t, a, "claimed", waitHold("w1", time.Minute))
	zkRelease(t, a, "claimed", "h1", true)
	claimed := mustGrant(t, a, "claimed", waitHold("w1", time.Minute))
	if claimed.Fence <= first.Fence {
		t.Fatalf("claimed fence %d after %d", claimed.Fence, first.Fence)
	}
	leaseNode(t, raw, "claimed", "w1")

	// Handed over: a release through a hands the key to its waiter.
	mustGrant(t, a, "handed", hold("h2", time.Minute))
	w2 := waiterFor("w2", time.Minute)
	mustBusy(t, a, "handed", w2)
	releaseThen(t, a, "handed", "h2", w2)
	handed := mustGrant(t, a, "handed", w2)
	leaseNode(t, raw, "handed", "w2")
	if n := lockNodes(t, raw, "handed"); len(n) != 1 {
		t.Fatalf("nodes after the handoff: %v", n)
	}

	// Extended into a lease: the connection-bound lock's node is replaced,
	// its fence kept.
	bound := hold("h3", time.Minute)
	bound.Mode = engine.Bound
	boundGrant := mustGrant(t, a, "expired", bound)
	if _, err := a.Extend(ctx, "expired", "h3", time.Minute, engine.Lease); err != nil {
		t.Fatal(err)
	}
	leaseNode(t, raw, "expired", "h3")

	a.Close()
	for key, want := range map[string]engine.Grant{"claimed": claimed, "handed": handed, "expired": boundGrant} {
		h, ok, err := b.Inspect(ctx, key)
		if !ok || err != nil || h.Token != want.Token || h.Fence != want.Fence || h.Mode != engine.Lease || h.Validity < 30*time.Second {
			t.Fatalf("%s after its instance closed: %+v %v %v; want %s's lease with fence %d", key, h, ok, err, want.Token, want.Fence)
		}
		mustBusy(t, b, key, hold("b", time.Second))
		zkRelease(t, b, key, want.Token, true)
		if next := mustGrant(t, b, key, hold("b", time.Second)); next.Fence <= want.Fence {
			t.Fatalf("%s: fence %d after %d", key, next.Fence, want.Fence)
		}
	}
}
