package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// Adversarial sequences against the design of issue 25, each forced on a
// real ZooKeeper (review atk25).

// convertedTo waits until key's lowest node on the server is a node of
// kind, the converted node of a mode change.
func convertedTo(t *testing.T, srvAddr, key string, kind byte) {
	t.Helper()
	raw := rawZK(t, srvAddr)
	eventually(t, 10*time.Second, "the converted node on the server", func() bool {
		kids := parseChildren(lockNodes(t, raw, key))
		return len(kids) > 0 && len(kids[0].name) > tokenIDLen+1 && kids[0].name[tokenIDLen+1] == kind
	})
}

// TestZKAttackLostConvertReplyIsUnknown: T holds a lease through A; LOCK
// … TOKEN T without a TTL (bound) through A converts the node to an
// ephemeral one of A's session; the multi lands but its reply is lost. The
// lock's mode changed, so A must not answer "unavailable, nothing was
// granted": the client would keep counting on its lease, which now ends
// with A's session — here before the lease's own end.
func TestZKAttackLostConvertReplyIsUnknown(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.cut.Addr())
	b := newTimedZK(t, srv.Addr())
	key := "lost-convert"
	g := mustGrant(t, a, key, hold("T", 30*time.Second))
	leaseEnd := time.Now().Add(g.Validity)
	link.delay.SetDelay(700 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(testCtx(t), key, boundHold("T", 30*time.Second))
		done <- err
	}()
	convertedTo(t, srv.Addr(), key, kindBound)
	link.cut.Cut() // the multi's reply is still on the slow link
	link.delay.SetDelay(0)
	err := <-done
	if !errors.Is(err, engine.ErrOutcomeUnknown) {
		// Show what the guess costs: A's session ends while cut off, and
		// with it the node of the lease the client still counts on.
		granted := false
		for deadline := time.Now().Add(3 * sessionTimeout); !granted && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			_, aerr := b.Acquire(testCtx(t), key, hold("C", time.Second))
			granted = aerr == nil
		}
		t.Fatalf("A's answer to a conversion whose reply was lost: %v; want an unknown outcome (C granted %v, %v before T's lease ended)",
			err, granted, time.Until(leaseEnd).Round(time.Millisecond))
	}
	link.cut.Restore()
}
