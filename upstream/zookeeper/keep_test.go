package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// placeName is the name of waiter id's place among key's nodes on the
// server, "" if it has none.
func placeName(t *testing.T, raw *zk.Conn, key, id string) string {
	t.Helper()
	for _, name := range lockNodes(t, raw, key) {
		if strings.HasPrefix(name, placePrefix(id)) {
			return name
		}
	}
	return ""
}

// keptWaiter is a waiter's hold whose place lasts keep.
func keptWaiter(token string, keep time.Duration) engine.Hold {
	h := waiterFor(token, time.Minute)
	h.Waiter.Keep = keep
	return h
}

// TestZooKeeperSlowTryKeepsPlace: a waiter's try that ZooKeeper slows
// past the waiter's keep (each request well within the receive timeout)
// does not cost the waiter its place in line: the instance's own timer
// does not end the place while the try is under way, and the waiter,
// which arrived first, is served before a waiter that arrived after it
// through another instance.
func TestZooKeeperSlowTryKeepsPlace(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	slow := newTimedZK(t, link.cut.Addr())
	fast := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	const key, keep = "slowtry", time.Second
	mustGrant(t, fast, key, hold("H", time.Minute))
	first, second := keptWaiter("w0", keep), keptWaiter("w1", keep)
	mustBusy(t, slow, key, first) // w0's place, first in line
	mustBusy(t, fast, key, second)
	was := placeName(t, raw, key, "w0")

	// Two round trips of 0.8 s: the try lasts about 1.6 s, past the keep
	// that w0's last try left.
	// Meanwhile w1 keeps its own place, as its instance does.
	link.delay.SetDelay(400 * time.Millisecond)
	done := make(chan struct{})
	refused := make(chan error, 1)
	go func() {
		defer close(refused)
		for range 20 {
			select {
			case <-done:
				return
			case <-time.After(keep / 3):
			}
			if _, err := fast.Acquire(testCtx(t), key, second); !errors.Is(err, engine.ErrNotAcquired) {
				refused <- fmt.Errorf("w1's try while w0's is slow: %v; want it refused", err)
				return
			}
		}
	}()
	began := time.Now()
	mustBusy(t, slow, key, first)
	took := time.Since(began)
	close(done)
	if err := <-refused; err != nil {
		t.Fatal(err)
	}
	link.delay.SetDelay(0)
	if took <= keep {
		t.Fatalf("the slow try took %v, not past the keep (%v): the test proves nothing", took, keep)
	}
	mustBusy(t, slow, key, first) // w0 calls again, within its keep
	if now := placeName(t, raw, key, "w0"); now != was {
		t.Fatalf("w0's place %q after a try of %v, want %q: its keep ran out during the try, and it stands behind w1 now (nodes %v)",
			now, took, was, lockNodes(t, raw, key))
	}
	zkRelease(t, fast, key, "H", true)
	mustBusy(t, fast, key, second)
	mustGrant(t, slow, key, first)
}

// TestZooKeeperKeepCountsFromTheLastTry: a waiter's try that fails before
// it could keep the place (its ctx ended while ZooKeeper was slow) still
// counts as a call: the place lasts the keep from the try's end, not from
// the keep that the waiter's earlier try left. A waiter that calls no
// more loses its place all the same, and nothing of its tries is left
// behind.
func TestZooKeeperKeepCountsFromTheLastTry(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	slow := newTimedZK(t, link.cut.Addr())
	fast := newZK(t, []string{srv.Addr()}, Options{})
	raw := rawZK(t, srv.Addr())
	const key, keep = "failedtry", 3 * time.Second
	mustGrant(t, fast, key, hold("H", time.Minute))
	w := keptWaiter("w0", keep)
	mustBusy(t, slow, key, w)
	kept := time.Now() // the keep runs from about here
	was := placeName(t, raw, key, "w0")

	// Round trips of 1.4 s (each within the receive timeout of 2.67 s):
	// the ctx ends during the second request, before the try keeps the
	// place.
	link.delay.SetDelay(700 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
	_, err := slow.Acquire(ctx, key, w)
	cancel()
	ended := time.Now()
	link.delay.SetDelay(0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the slow try: %v; want its ctx's deadline", err)
	}
	// Past the keep that the earlier try left, well within the keep from
	// this try's end.
	time.Sleep(time.Until(kept.Add(keep + 700*time.Millisecond)))
	if time.Since(ended) >= keep {
		t.Fatalf("checked %v after the try, past its keep: the test proves nothing", time.Since(ended))
	}
	if now := placeName(t, raw, key, "w0"); now != was {
		t.Fatalf("w0's place %q %v after its last try ended, want %q kept for %v from then (nodes %v)",
			now, time.Since(ended), was, keep, lockNodes(t, raw, key))
	}
	eventually(t, 10*time.Second, "w0's place ended once w0 called no more", func() bool {
		return placeName(t, raw, key, "w0") == "" && !slow.hasPlace(key, "w0")
	})
	slow.mu.Lock()
	trying := len(slow.trying)
	slow.mu.Unlock()
	if trying != 0 {
		t.Fatalf("%d waiters' tries still counted as under way", trying)
	}
}
