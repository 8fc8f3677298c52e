package quorum

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A grant returned before its last node answered leaves no goroutine
// waiting for that answer: the node's reply is handled by the goroutine
// that delivers it, which clears the grant's in-flight record.
func TestLateAcquireReplyWaitsOnNoGoroutine(t *testing.T) {
	nodes := newFakeNodes(3)
	hang := make(chan struct{})
	nodes[2].hang = hang
	r := New(asNodes(nodes), Config{NodeTimeout: 5 * time.Second})
	defer r.Close()
	g, err := r.Acquire(context.Background(), "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	if p := r.pending("k", "a"); p.attempt != g.Attempt {
		t.Fatalf("in flight: %+v, want the grant's attempt %s", p, g.Attempt)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, waiter := range []string{"quorum.(*Redlock).settle", "quorum.(*flight).Wait"} {
		if strings.Contains(stacks, waiter) {
			t.Errorf("a goroutine waits for the late reply in %s", waiter)
		}
	}
	close(hang)
	waitFor(t, "the late reply", func() bool { return r.pending("k", "a").attempt == "" })
}

// Replies put while the flight's reader detaches it are each handled once,
// by the reader before it detached or by late after, and then runs once.
func TestFlightDetachHandlesEachReplyOnce(t *testing.T) {
	const n = 3
	for range 2000 {
		f := &flight{replies: make(chan Reply, n), n: n, health: newHealth(n, 2), cancel: func() {}}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { f.Put(Reply{Tag: i}) })
		}
		var seen [n]atomic.Int32
		read := 0
		if len(f.replies) > 0 { // the reader takes one before it hands over
			rep := <-f.replies
			f.note(rep)
			seen[rep.Tag].Add(1)
			read++
		}
		var thens atomic.Int32
		landed := make(chan struct{})
		f.detach(func(rep Reply) { seen[rep.Tag].Add(1) }, func() {
			if thens.Add(1) == 1 {
				close(landed)
			}
		})
		wg.Wait()
		select {
		case <-landed:
		case <-time.After(5 * time.Second):
			t.Fatalf("then did not run (read %d before detach, got %d)", read, f.got)
		}
		for i := range seen {
			if c := seen[i].Load(); c != 1 {
				t.Fatalf("reply %d handled %d times", i, c)
			}
		}
		if thens.Load() != 1 || f.got != n {
			t.Fatalf("then ran %d times, %d replies noted", thens.Load(), f.got)
		}
	}
}

// await returns once k replies were put, however the puts interleave with
// its publishing of k: no wake is lost, and a stale token only makes it
// check again.
func TestFlightAwaitLosesNoWake(t *testing.T) {
	const n = 5
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2000 {
		f := &flight{replies: make(chan Reply, n), wake: make(chan struct{}, 1), n: n}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { f.Put(Reply{Tag: i}) })
		}
		for k := 1; k <= n; k += 2 {
			if !f.await(ctx, k) {
				t.Fatalf("await(%d) ended by its context with %d replies put", k, f.arrived.Load())
			}
			if len(f.replies) < k {
				t.Fatalf("await(%d) returned with %d replies on the channel", k, len(f.replies))
			}
		}
		wg.Wait()
	}
}
