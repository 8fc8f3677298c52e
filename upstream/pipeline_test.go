package upstream

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

func TestNoScriptFallback(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		mustAcquire(t, n, "k", hold("a", time.Minute))
		mustRelease(t, n, "k", "a", true) // loads release.lua
		if err := raw.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before := n.Stats()
		mustAcquire(t, n, "k", hold("a", time.Minute))
		if ok, err := raw.ScriptExists(ctx, acquireScript.sha).Result(); err != nil || !ok[0] {
			t.Errorf("acquire.lua not cached again after the fallback: %v, %v", ok, err)
		}
		if after := n.Stats(); after.RoundTrips-before.RoundTrips != 2 {
			t.Errorf("%d round trips after SCRIPT FLUSH, want 2 (EVALSHA, then EVAL)", after.RoundTrips-before.RoundTrips)
		}
	})
}

func TestTypedNoScript(t *testing.T) {
	raw := rawClient(t, startEmbedded(t, 1).Addrs()[0])
	err := typed(raw.EvalSha(testCtx(t), strings.Repeat("0", 40), nil).Err())
	if !errors.Is(err, ErrNoScript) {
		t.Errorf("typed(EVALSHA of an unknown script) = %v, want ErrNoScript", err)
	}
}

func TestKilledNodeFailsFastAndRecovers(t *testing.T) {
	s := redistest.Start(t, redistest.Options{AppendFsyncAlways: true})
	n, ctx := newNode(t, RedisOptions{Addr: s.Addr()}), testCtx(t)
	mustAcquire(t, n, "k", hold("a", time.Minute))
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := n.Acquire(ctx, "k", hold("a", time.Minute))
	var nodeErr *NodeError
	if !errors.As(err, &nodeErr) || nodeErr.Addr != s.Addr() {
		t.Fatalf("Acquire on a killed node = %v, want a NodeError for %s", err, s.Addr())
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Acquire on a killed node took %v", took)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// The restarted node kept the lock but lost its script cache.
	eventually(t, 5*time.Second, "node answers after restart", func() bool {
		c, err := n.Acquire(ctx, "k", hold("a", time.Minute))
		return err == nil && c.State == quorum.Mine
	})
}

func TestCancelledCallReturnsPromptly(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	mustAcquire(t, n, "warm", hold("a", time.Minute))

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := n.Acquire(cancelled, "k", hold("a", time.Minute)); err != context.Canceled {
		t.Errorf("Acquire with a cancelled ctx = %v, want context.Canceled", err)
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := n.Acquire(ctx, "k", hold("a", time.Minute))
	if err != context.DeadlineExceeded {
		t.Errorf("Acquire on a paused node = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Acquire on a paused node took %v", took)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	// The abandoned call may or may not have run; the node still works.
	mustAcquire(t, n, "after", hold("a", time.Minute))
}

func TestNodeTimeoutBoundsCallsWithoutDeadline(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Timeout: 100 * time.Millisecond})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	start := time.Now()
	_, err := n.Acquire(context.Background(), "k", hold("a", time.Minute))
	var nodeErr *NodeError
	if !errors.As(err, &nodeErr) {
		t.Errorf("Acquire on a paused node without deadline = %v, want a NodeError", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Acquire took %v with a 100ms node timeout", took)
	}
}

// scriptCalls is the node's own count of the scripts it ran by EVALSHA
// (INFO commandstats), independent of the RedisNode's Stats.
func scriptCalls(t *testing.T, raw *redis.Client) int64 {
	t.Helper()
	info, err := raw.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ := strings.Cut(infoField(info, "cmdstat_evalsha"), ",") // calls=N,usec=...
	calls, _ := strconv.ParseInt(strings.TrimPrefix(v, "calls="), 10, 64)
	return calls
}

// TestConcurrentCallsAreBatched holds the node still (SIGSTOP) until every
// call is queued, so without batching there would be one round trip per
// call.
func TestConcurrentCallsAreBatched(t *testing.T) {
	const calls, pipelines, maxBatch = 200, 2, 64
	s := redistest.Start(t, redistest.Options{})
	n, raw := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: pipelines, MaxBatch: maxBatch}), rawClient(t, s.Addr())
	mustAcquire(t, n, "warm", hold("a", time.Minute))                        // loads acquire.lua
	if err := raw.ScriptLoad(t.Context(), opsScript.src).Err(); err != nil { // the batches' script
		t.Fatal(err)
	}
	warmScripts := scriptCalls(t, raw)
	before := n.Stats()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	errs := acquireConcurrently(t, n, calls, func(i int) (string, string) {
		return fmt.Sprintf("k%d", i), fmt.Sprintf("t%d", i)
	})
	// Wait until nothing can move before Resume: every call is sent or
	// queued.
	eventually(t, 5*time.Second, "calls sent or queued", func() bool {
		return n.Stats().Calls-before.Calls+uint64(n.queued()) == calls
	})
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	for err := range errs {
		t.Error(err)
	}
	after := n.Stats()
	stats := Stats{Calls: after.Calls - before.Calls, RoundTrips: after.RoundTrips - before.RoundTrips}
	// Each batch's acquires run as one script call (opsScript).
	if ran := scriptCalls(t, raw) - warmScripts; stats.Calls != calls || ran != int64(stats.RoundTrips) {
		t.Errorf("calls sent = %d (the node ran %d scripts), want %d in %d", stats.Calls, ran, calls, stats.RoundTrips)
	}
	// At most 2 batches are stuck on the paused node; the other calls are
	// queued and go out in batches of up to 64: typically 4 to 8 round trips.
	// Without batching there would be 200.
	t.Logf("%d calls in %d round trips", stats.Calls, stats.RoundTrips)
	if stats.RoundTrips > calls/10 {
		t.Errorf("%d round trips for %d calls, want at most %d", stats.RoundTrips, calls, calls/10)
	}
	for i := range calls {
		if e := mustInspect(t, n, fmt.Sprintf("k%d", i)); e.Token != fmt.Sprintf("t%d", i) {
			t.Errorf("k%d held by %s", i, e.Token)
		}
	}
}

// TestConcurrentSameKey: of many tokens racing for one key, exactly one wins.
func TestConcurrentSameKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n := newNode(t, RedisOptions{Addr: addr})
		var won atomic.Int64
		ctx := testCtx(t)
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				c, err := n.Acquire(ctx, "k", hold(fmt.Sprint(i), time.Minute))
				if err != nil {
					t.Error(err)
				}
				if c.State == quorum.Acquired {
					won.Add(1)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Errorf("%d tokens acquired the same key, want 1", won.Load())
		}
	})
}

// acquireConcurrently starts calls goroutines acquiring key(i) for token(i)
// and returns a channel of their errors, closed when all are done.
func acquireConcurrently(t *testing.T, n *RedisNode, calls int, kt func(int) (string, string)) <-chan error {
	ctx := testCtx(t)
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			key, token := kt(i)
			c, err := n.Acquire(ctx, key, hold(token, time.Minute))
			if err != nil || c.State != quorum.Acquired {
				errs <- fmt.Errorf("Acquire(%s) = %+v, %v", key, c, err)
			}
		})
	}
	go func() { wg.Wait(); close(errs) }()
	return errs
}

func TestClosedNode(t *testing.T) {
	n := NewRedisNode(RedisOptions{Addr: startEmbedded(t, 1).Addrs()[0]})
	mustAcquire(t, n, "k", hold("a", time.Minute))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := n.Release(testCtx(t), "k", "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
}

// TestCloseWhilePaused: Close of a node that answers nothing waits for the
// queued calls no longer than their deadlines (capped by Timeout), and those
// calls fail with a timeout.
func TestCloseWhilePaused(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Timeout: 200 * time.Millisecond})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	const calls = 50
	before := n.Stats().Calls
	errs := acquireConcurrently(t, n, calls, func(i int) (string, string) { return fmt.Sprint(i), "a" })
	eventually(t, 5*time.Second, "calls sent or queued", func() bool {
		return n.Stats().Calls-before+uint64(n.queued()) == calls
	})
	start := time.Now()
	n.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %v", took)
	}
	for err := range errs {
		if !strings.Contains(err.Error(), "timeout") {
			t.Errorf("call during Close: %v, want a timeout", err)
		}
	}
}

// TestCloseFinishesQueuedCalls: calls queued before Close still run: a
// release that returned once a majority answered reaches the last node
// during a drain.
func TestCloseFinishesQueuedCalls(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n := NewRedisNode(RedisOptions{Addr: addr})
		ctx := testCtx(t)
		const calls = 200
		done := make(quorum.Replies, calls)
		for i := range calls {
			n.Do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("q", i), Hold: hold("a", time.Minute)}, i, done)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		for range calls {
			if r := <-done; r.Err != nil || r.Claim.State != quorum.Acquired {
				t.Fatalf("call %d queued before Close: %+v", r.Tag, r)
			}
		}
		r := make(quorum.Replies, 1)
		n.Do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: "q0"}, 0, r)
		if got := <-r; !errors.Is(got.Err, ErrClosed) {
			t.Fatalf("call after Close: %+v", got)
		}
	})
}

// TestNoGoroutineLeak: after Close, none of the node's goroutines remain.
func TestNoGoroutineLeak(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		baseline := runtime.NumGoroutine()
		n := NewRedisNode(RedisOptions{Addr: addr})
		errs := acquireConcurrently(t, n, 100, func(i int) (string, string) { return fmt.Sprint(i), "a" })
		for err := range errs {
			t.Error(err)
		}
		n.Close()
		checkNoNodeGoroutines(t)
		// Nor any of go-redis's, nor the server's for our connections.
		eventually(t, 5*time.Second, "goroutine count back to baseline", func() bool {
			return runtime.NumGoroutine() <= baseline
		})
	})
}

// checkNoNodeGoroutines waits for every goroutine running RedisNode code to
// end, and fails listing them if some do not.
func checkNoNodeGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := nodeGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d node goroutines left after Close:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nodeGoroutines() []string {
	buf := make([]byte, 1<<20)
	var left []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "upstream.(*RedisNode)") {
			left = append(left, g)
		}
	}
	return left
}
