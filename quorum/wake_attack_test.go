package quorum

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Attacks on branch wake: a decided fan-out's late replies handled by the
// goroutine that delivers them (flight.detach), the caller's single wake
// (flight.await), and Close waiting for both.

// withheld wraps a node: the replies of ops of kind (while armed) are
// applied by the node at once but delivered only when flush runs, on the
// goroutine that runs it and ignoring the call's context, as a pipeline's
// reader delivers a batch's replies (at its deadline at the latest, not
// when the caller gives up). With inline, every Do flushes first, on its
// caller's goroutine, as upstream's Do fails the calls it prunes.
type withheld struct {
	Node
	kind   OpKind
	armed  atomic.Bool
	inline bool

	mu    sync.Mutex
	held  []func()
	count atomic.Int32 // replies withheld so far
}

func (w *withheld) Do(ctx context.Context, op *Op, tag int, done Sink) {
	if w.inline {
		w.flush()
	}
	if op.Kind != w.kind || !w.armed.Load() {
		w.Node.Do(ctx, op, tag, done)
		return
	}
	mine := make(Replies, 1)
	w.Node.Do(ctx, op, tag, mine)
	go func() {
		rep := <-mine
		w.mu.Lock()
		w.held = append(w.held, func() { done.Put(rep) })
		w.mu.Unlock()
		w.count.Add(1)
	}()
}

// flush delivers the withheld replies on the calling goroutine.
func (w *withheld) flush() {
	w.mu.Lock()
	held := w.held
	w.held = nil
	w.mu.Unlock()
	for _, put := range held {
		put()
	}
}

// Close must not return while a grant's late acquire reply is still to be
// handled: the callback that clears the in-flight record runs on the
// delivering goroutine after Close began, and Close waits for it.
func TestWakeCloseWaitsForTheLateReplysCallback(t *testing.T) {
	nodes := newFakeNodes(3)
	w := &withheld{Node: nodes[2], kind: OpAcquire}
	w.armed.Store(true)
	r := New([]Node{nodes[0], nodes[1], w}, Config{NodeTimeout: 5 * time.Second})
	g, err := r.Acquire(context.Background(), "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 2's withheld reply", func() bool { return w.count.Load() == 1 })
	if p := r.pending("k", "a"); p.attempt != g.Attempt {
		t.Fatalf("in flight: %+v, want %s", p, g.Attempt)
	}
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while the grant's last acquire reply was still to come")
	case <-time.After(100 * time.Millisecond):
	}
	w.flush() // the reader delivers it now: the callback runs here
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits once every reply came")
	}
	if p := r.pending("k", "a"); p.attempt != "" {
		t.Fatalf("in-flight record left after Close: %+v", p)
	}
}

// A late acquire reply delivered on the goroutine of another caller's Do
// (upstream fails pruned calls there) runs settle's callback on it: the
// release that called Do must have read the pending acquire first, and
// nothing may deadlock (the callback takes Redlock.mu).
func TestWakeLateReplyDeliveredInsideAReleasesDo(t *testing.T) {
	nodes := newFakeNodes(3)
	w := &withheld{Node: nodes[2], kind: OpAcquire, inline: true}
	w.armed.Store(true)
	r := New([]Node{nodes[0], nodes[1], w}, Config{NodeTimeout: 5 * time.Second})
	defer r.Close()
	g, err := r.Acquire(context.Background(), "k", hold("a"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 2's withheld reply", func() bool { return w.count.Load() == 1 })
	w.armed.Store(false)
	if p := r.pending("k", "a"); p.attempt != g.Attempt {
		t.Fatalf("in flight: %+v, want %s", p, g.Attempt)
	}
	done := make(chan error, 1)
	go func() {
		ok, err := r.Release(context.Background(), "k", "a", nil, nil)
		if err == nil && !ok {
			err = errors.New("release reported not held")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("release deadlocked on the late reply delivered inside its own Do")
	}
	if p := r.pending("k", "a"); p.attempt != "" {
		t.Fatalf("in-flight record left: %+v", p)
	}
	// The release decided on two nodes; its call to node 2 lands after.
	waitFor(t, "the release on every node", func() bool { return holders(nodes, "k", "a") == 0 })
}

// A release without a quorum (two nodes silent until their calls time out) is
// carried to them once their calls landed, from the goroutine that
// delivered the last timeout; the carried release reaches them once they
// come back, and Close waits for the carry.
func TestWakeUndecidedReleaseCarriedAfterTheTimeout(t *testing.T) {
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{NodeTimeout: 100 * time.Millisecond})
	if _, err := r.Acquire(context.Background(), "k", hold("a")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the grant on every node", func() bool { return holders(nodes, "k", "a") == 3 })
	nodes[1].pause()
	nodes[2].pause()
	_, err := r.Release(context.Background(), "k", "a", nil, nil)
	var noQuorum *engine.NoQuorumError
	if !errors.As(err, &noQuorum) {
		t.Fatalf("release with two paused nodes: %v, want no quorum (carried)", err)
	}
	// The first calls time out; carry resends, queued by the paused nodes.
	waitFor(t, "the carried release queued", func() bool {
		for _, n := range nodes[1:] {
			n.mu.Lock()
			q := len(n.queued)
			n.mu.Unlock()
			if q < 2 {
				return false
			}
		}
		return true
	})
	nodes[1].resume(true) // the carried one first, then the timed-out one
	nodes[2].resume(false)
	waitFor(t, "the release on every node", func() bool { return holders(nodes, "k", "a") == 0 })
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs after the carried release")
	}
}

// Many grants and releases with nodes that answer at random paces, some
// replies delivered inside other callers' Do: every call finishes (no
// caller sleeps through its wake to its context's end), no in-flight
// record is left, and Close returns.
func TestWakeStressNoLostWake(t *testing.T) {
	nodes := newFakeNodes(5)
	ws := make([]Node, len(nodes))
	for i, n := range nodes {
		n.delay = time.Duration(i) * 300 * time.Microsecond
		w := &withheld{Node: n, kind: OpAcquire, inline: i >= 3}
		ws[i] = w
	}
	r := New(ws, Config{NodeTimeout: 2 * time.Second})
	// Flush the withheld replies now and then, from a goroutine of its own.
	stop := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(rand.IntN(3)) * time.Millisecond):
			}
			for _, w := range ws[3:] {
				w.(*withheld).flush()
			}
		}
	})
	for _, w := range ws[3:] {
		w.(*withheld).armed.Store(true)
	}
	const workers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	deadline := time.Now().Add(30 * time.Second)
	for c := range workers {
		wg.Go(func() {
			for i := range rounds {
				if time.Now().After(deadline) {
					return
				}
				key, tok := fmt.Sprintf("k%d", c%3), fmt.Sprintf("t%d-%d", c, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				g, err := r.Acquire(ctx, key, hold(tok))
				if ctx.Err() != nil { // the caller's own end, not a node's call timing out
					errs <- fmt.Errorf("acquire %s slept to its deadline: %v", key, err)
				}
				if err == nil {
					if _, err := r.Release(ctx, key, g.Token, nil, nil); ctx.Err() != nil {
						errs <- fmt.Errorf("release %s slept to its deadline: %v", key, err)
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	closeFlushing(t, r, stop, &flusher) // the flusher still delivers
}

// closeFlushing closes r while flusher still delivers late replies, then
// stops the flusher: Close must return, with every in-flight record gone.
func closeFlushing(t *testing.T, r *Redlock, stop chan struct{}, flusher *sync.WaitGroup) {
	t.Helper()
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	close(stop)
	flusher.Wait()
	r.mu.Lock()
	left := len(r.inflight)
	r.mu.Unlock()
	if left != 0 {
		t.Fatalf("Close returned with %d grants' late replies unhandled", left)
	}
}

// Close racing grants whose last reply comes late: each grant's callback
// either is waited for by Close or never runs after it returned with the
// in-flight record still set for good.
func TestWakeCloseRacesGrants(t *testing.T) {
	for range 50 {
		nodes := newFakeNodes(3)
		w := &withheld{Node: nodes[2], kind: OpAcquire}
		w.armed.Store(true)
		r := New([]Node{nodes[0], nodes[1], w}, Config{NodeTimeout: time.Second})
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() { _, _ = r.Acquire(context.Background(), fmt.Sprint("k", i), hold("a")) })
		}
		stop := make(chan struct{})
		var flusher sync.WaitGroup
		flusher.Go(func() {
			for {
				w.flush()
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		})
		wg.Wait() // Close after the grants returned: their callbacks are counted
		closeFlushing(t, r, stop, &flusher)
	}
}
