package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/netfault"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on the node connection's interleavings (conn.go, pipeline.go):
// each test drives one sequence of writes, replies, deadlines, restarts
// and closes against a real redis-server, stopped (SIGSTOP), killed or
// behind a delaying proxy (internal/netfault) at the step that matters.

// TestLateReplyBehindAnEarlierDeadline: two batches in flight (Pipelines
// 2), the first with a long deadline, the second with a short one; the
// node stops, and runs again after the second's deadline but before the
// first's. Both replies then come together: the first is answered, the
// second, read after its deadline, must fail (unknown outcome), never be
// delivered as if it came in time.
func TestLateReplyBehindAnEarlierDeadline(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: 2})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume() // if the test ends before it resumes the node (SIGCONT to a running one does nothing)
	long, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	short, cancel2 := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel2()
	done := make(quorum.Replies, 2)
	n.Do(long, &quorum.Op{Kind: quorum.OpAcquire, Key: "k1", Hold: hold("a", time.Minute)}, 1, done)
	n.Do(short, &quorum.Op{Kind: quorum.OpAcquire, Key: "k2", Hold: hold("b", time.Minute)}, 2, done)
	<-short.Done()
	time.Sleep(100 * time.Millisecond)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case r := <-done:
			if r.Tag == 2 && r.Err == nil {
				t.Errorf("the call whose deadline passed before its reply came was answered %+v, want an error", r.Claim)
			}
			if r.Tag == 1 && r.Err != nil {
				t.Logf("the call with the long deadline: %v", r.Err)
			}
		case <-time.After(testTimeout):
			t.Fatal("no reply")
		}
	}
	// The connection stays in step: later calls get their own replies.
	ctx := testCtx(t)
	for i := range 10 {
		if _, held, err := n.Inspect(ctx, fmt.Sprint("free", i)); err != nil || held {
			t.Fatalf("Inspect(free%d) = %v, %v", i, held, err)
		}
	}
}

// TestEarlierDeadlineAheadOfALaterOne: two batches in flight (Pipelines
// 2), the first with a short deadline, the second with a long one; the
// node stops, and runs again after the first's deadline but well before
// the second's. The first fails once its deadline passed, while the node
// is still stopped; the second, which still had time, must be answered,
// on the same connection: the first's deadline does not end the
// connection under the batch behind it. (A health probe's 1 s deadline,
// pipelined ahead of a renewal's heal across a link slower than that,
// ended the connection under the heal, which was lost.)
func TestEarlierDeadlineAheadOfALaterOne(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: 2})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	old := n.current()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume() // if the test ends before it resumes the node (SIGCONT to a running one does nothing)
	short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	long, cancel2 := context.WithTimeout(t.Context(), time.Minute) // the node's Timeout (5 s) bounds it
	defer cancel2()
	done := make(quorum.Replies, 2)
	n.Do(short, &quorum.Op{Kind: quorum.OpAcquire, Key: "k1", Hold: hold("a", time.Minute)}, 1, done)
	n.Do(long, &quorum.Op{Kind: quorum.OpAcquire, Key: "k2", Hold: hold("b", time.Minute)}, 2, done)
	select {
	case r := <-done:
		if r.Tag != 1 || r.Err == nil {
			t.Fatalf("first reply while the node is stopped: call %d, %+v, %v; want call 1's error", r.Tag, r.Claim, r.Err)
		}
	case <-time.After(testTimeout):
		t.Fatal("the call whose deadline passed got no reply while the node was stopped")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.Err != nil || r.Claim.State != quorum.Acquired {
			t.Fatalf("the call with time left behind it: %+v, %v; want acquired", r.Claim, r.Err)
		}
	case <-time.After(testTimeout):
		t.Fatal("the call with time left got no reply")
	}
	if cn := n.current(); cn != old {
		t.Errorf("the connection was replaced (now %p, was %p)", cn, old)
	}
	// The connection stays in step: the first call's late reply reaches
	// nobody, later calls get their own replies.
	ctx := testCtx(t)
	if e, held, err := n.Inspect(ctx, "k2"); err != nil || !held || e.Token != "b" {
		t.Fatalf("Inspect(k2) = %+v, %v, %v; want held by b", e, held, err)
	}
	for i := range 10 {
		if _, held, err := n.Inspect(ctx, fmt.Sprint("free", i)); err != nil || held {
			t.Fatalf("Inspect(free%d) = %v, %v", i, held, err)
		}
	}
}

// TestCallAsItsConnectionEnds: a call made the moment the only batch in
// flight on the node's connection passes its deadline, as the reader ends
// the connection for it, must not go out on that connection and fail with
// it: it goes out on the connection after it, or on a new one, and is
// answered. (A renewal's heal, sent on the renewal's answer just read,
// while a health probe behind that answer had passed its 1 s deadline
// across a slower link, was lost so.) The moment is raced over rounds.
func TestCallAsItsConnectionEnds(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: 2})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	defer s.Resume() // if the test ends with the node stopped (SIGCONT to a running one does nothing)
	for i := range 40 {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		done := make(quorum.Replies, 2)
		n.Do(short, &quorum.Op{Kind: quorum.OpInspect, Key: "k1"}, 1, done)
		end, _ := short.Deadline()
		time.Sleep(time.Until(end) + time.Duration(i%8)*25*time.Microsecond)
		n.Do(testCtx(t), &quorum.Op{Kind: quorum.OpInspect, Key: "k2"}, 2, done)
		select {
		case r := <-done:
			if r.Tag != 1 || r.Err == nil {
				t.Fatalf("round %d: first reply while the node is stopped: call %d, %v; want call 1's error", i, r.Tag, r.Err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("round %d: the call whose deadline passed got no reply", i)
		}
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r.Err != nil {
				t.Fatalf("round %d: the call made as the connection ended: %v", i, r.Err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("round %d: the call made as the connection ended got no reply", i)
		}
		cancel()
	}
}

// TestWriteCutMidway: a batch larger than the socket's buffers is being
// written (by a goroutine of its own) to a stopped node, a small batch
// queued behind it on the same connection, when the node is killed: the
// write fails midway. Every call fails with an error, none is answered;
// once the node runs again the next call dials anew and reaches the new
// process.
func TestWriteCutMidway(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: 2})
	echo := admitted(t, `return #ARGV[1]`)
	ctx := testCtx(t)
	first := evalOn(ctx, n, echo, nil, []string{"warm"})
	if first.Err != nil || first.Incarnation == "" {
		t.Fatalf("warm: %+v", first)
	}
	old := n.current()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	done := make(quorum.Replies, 2)
	n.Do(cctx, &quorum.Op{Kind: quorum.OpEval, Script: echo, Args: []string{strings.Repeat("x", 8<<20)}}, 1, done)
	n.Do(cctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute)}, 2, done)
	time.Sleep(100 * time.Millisecond) // the big write fills the buffers and waits
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case r := <-done:
			t.Logf("call %d cut midway: %v", r.Tag, r.Err)
			if r.Err == nil {
				t.Errorf("call %d cut midway answered %+v, want an error", r.Tag, r)
			}
			if cctx.Err() != nil {
				t.Errorf("call %d failed only at its deadline: %v", r.Tag, r.Err)
			}
		case <-time.After(testTimeout):
			t.Fatal("a call cut midway got no reply")
		}
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	r := doOn(ctx, n, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute)})
	if r.Err != nil || r.Claim.State != quorum.Acquired {
		t.Fatalf("first call after the restart: %+v", r)
	}
	if cn := n.current(); cn == nil || cn == old || r.Incarnation == first.Incarnation {
		t.Errorf("call after the cut on %p (old %p), incarnation %q (old %q)", cn, old, r.Incarnation, first.Incarnation)
	}
}

// TestNoScriptResendAcrossRestart: a call's EVALSHA gets NOSCRIPT, and the
// node restarts while that reply is on its way (a proxy delays it): the
// re-send by EVAL is written on the same connection, which reached the old
// process, so it cannot reach the new one. The call fails; it is never
// answered with the old incarnation for a script the new one ran, nor
// with a success the old one never gave. The next call reaches the new
// process and says so.
func TestNoScriptResendAcrossRestart(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	p, err := netfault.Listen(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n := newNode(t, RedisOptions{Addr: p.Addr()})
	raw := rawClient(t, s.Addr())
	ctx := testCtx(t)
	count := admitted(t, `return redis.call('INCR', KEYS[1])`)
	first := evalOn(ctx, n, count, []string{"runs"}, nil)
	if first.Err != nil || first.Incarnation == "" {
		t.Fatalf("warm: %+v", first)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(400 * time.Millisecond)
	sent := n.Stats().Calls
	got := make(quorum.Replies, 1)
	go func() { got <- evalOn(ctx, n, count, []string{"runs"}, nil) }()
	time.Sleep(600 * time.Millisecond) // EVALSHA ran; its NOSCRIPT is in the proxy
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	var r quorum.Reply
	select {
	case r = <-got:
	case <-time.After(testTimeout):
		t.Fatal("no reply")
	}
	t.Logf("call whose re-send met a restart: %v", r.Err)
	if c := n.Stats().Calls - sent; c != 2 {
		t.Fatalf("%d sends of the call, want 2 (EVALSHA, then the re-send by EVAL): the NOSCRIPT did not come before the restart", c)
	}
	if r.Err == nil {
		t.Errorf("call whose re-send met a restart answered %+v from %q (old %q)", r.Value, r.Incarnation, first.Incarnation)
	}
	p.SetDelay(0)
	after := evalOn(ctx, n, count, []string{"runs"}, nil)
	if after.Err != nil || after.Incarnation == "" || after.Incarnation == first.Incarnation || after.Incarnation != n.Incarnation() {
		t.Fatalf("call after the restart: %+v (old incarnation %q, node's %q)", after, first.Incarnation, n.Incarnation())
	}
}

// TestClockJumpWithNoScript: a batch whose calls got NOSCRIPT and whose
// TIME shows a jump is answered with the jump, and nothing is re-sent (a
// re-send's votes would count though the node's clock is in doubt); the
// next batch is the new baseline.
func TestClockJumpWithNoScript(t *testing.T) {
	s, clock := clockshim.StartRedis(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	raw := rawClient(t, s.Addr())
	ctx := testCtx(t)
	for i := range 5 {
		if _, _, err := n.Inspect(ctx, "k"); err != nil {
			t.Fatalf("call %d without a step: %v", i, err)
		}
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	evals := cmdCalls(t, raw, "eval")
	if _, err := clock.Step(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
	_, _, err := n.Inspect(ctx, "k")
	if !errors.Is(err, quorum.ErrClockJumped) {
		t.Fatalf("NOSCRIPT'ed call in the batch that saw the jump: %v, want ErrClockJumped", err)
	}
	if got := cmdCalls(t, raw, "eval"); got != evals {
		t.Errorf("%d EVAL re-sends after a batch that saw a jump", got-evals)
	}
	if _, _, err := n.Inspect(ctx, "k"); err != nil {
		t.Fatalf("call after the jump was seen (re-sent by EVAL): %v", err)
	}
}

// TestClockJumpAfterClocklessBatch: a release's batch carries no TIME, so
// a jump before it is not seen there (the release is answered); the next
// batch that can grant sees it, and only that one.
func TestClockJumpAfterClocklessBatch(t *testing.T) {
	s, clock := clockshim.StartRedis(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	ctx := testCtx(t)
	for i := range 3 {
		mustAcquire(t, n, fmt.Sprint("k", i), hold("a", time.Minute))
	}
	if _, err := clock.Step(-5 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	for i := range 3 {
		if ok, err := n.Release(ctx, fmt.Sprint("k", i), "a"); err != nil || !ok {
			t.Fatalf("release %d (no TIME) after the step: %v, %v", i, ok, err)
		}
	}
	if c := n.Clock(); c.Jumps != 0 {
		t.Fatalf("a clockless batch counted a jump: %+v", c)
	}
	if _, err := n.Acquire(ctx, "k0", hold("b", time.Minute)); !errors.Is(err, quorum.ErrClockJumped) {
		t.Fatalf("first acquire after the releases: %v, want ErrClockJumped", err)
	}
	if _, err := n.Acquire(ctx, "k0", hold("b", time.Minute)); err != nil {
		t.Fatalf("acquire after the jump was seen: %v", err)
	}
	if c := n.Clock(); c.Jumps != 1 {
		t.Fatalf("jumps counted: %+v", c)
	}
}

// silentServer accepts connections and never answers: a dial to it hangs
// in the introduction (INFO) until the dial's deadline.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestCallersDuringAFailingDial: many callers arrive while a dial hangs;
// the dial gives up at its timeout and every caller gets its error then,
// before its own deadline; a call after that dials again; Close called
// while a dial hangs waits for it, refuses calls meanwhile, and nothing
// is left running after.
func TestCallersDuringAFailingDial(t *testing.T) {
	addr := silentServer(t)
	baseline := runtime.NumGoroutine()
	n := NewRedisNode(RedisOptions{Addr: addr, DialTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const callers = 50
	done := make(quorum.Replies, callers)
	for i := range callers {
		n.Do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: fmt.Sprint("k", i), Hold: hold("a", time.Minute)}, i, done)
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // the dial is under way
		}
	}
	for range callers {
		r := <-done
		if r.Tag == 0 {
			t.Logf("call during a dial that timed out: %v", r.Err)
		}
		if r.Err == nil || errors.Is(r.Err, context.DeadlineExceeded) && ctx.Err() != nil {
			t.Fatalf("call %d during a dial that timed out: %+v", r.Tag, r)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("callers waited past their own deadline")
	}
	// A call after the failure dials again, and Close meanwhile waits.
	n.Do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: "k"}, 100, done)
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	eventually(t, 5*time.Second, "Close refuses calls", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.closed
	})
	late := make(quorum.Replies, 1)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: "k"}, 101, late)
	if r := <-late; !errors.Is(r.Err, ErrClosed) {
		t.Errorf("call during Close: %+v, want ErrClosed", r)
	}
	if r := <-done; r.Tag != 100 || r.Err == nil {
		t.Errorf("call queued on the dial Close waited for: %+v", r)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	checkNoNodeGoroutines(t)
	eventually(t, 5*time.Second, "goroutine count back to baseline", func() bool {
		return runtime.NumGoroutine() <= baseline+1 // the silent server's accept loop
	})
}

// TestCloseDuringBigWrite: Close while a batch larger than the socket's
// buffers is being written to a stopped node waits for the call's
// deadline, fails the call, and leaves no goroutine (the big write's own
// among them).
func TestCloseDuringBigWrite(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := NewRedisNode(RedisOptions{Addr: s.Addr()})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	echo := admitted(t, `return #ARGV[1]`)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	done := make(quorum.Replies, 2)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpEval, Script: echo, Args: []string{strings.Repeat("x", 8<<20)}}, 1, done)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: "k"}, 2, done) // queued behind it
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := <-done; r.Err == nil {
			t.Errorf("call %d on a stopped node: %+v", r.Tag, r)
		}
	}
	checkNoNodeGoroutines(t)
}

// TestNodeClosesBetweenBatches: the node closes an idle connection
// (CLIENT KILL; its idle timeout): the reader sees it, and the next call
// dials anew and succeeds. A kill racing the next call may fail that call
// (it was written on the killed connection), never answer it wrongly, and
// the one after succeeds.
func TestNodeClosesBetweenBatches(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	raw := rawClient(t, s.Addr())
	ctx := testCtx(t)
	mustAcquire(t, n, "k", hold("a", time.Minute))
	kill := func() {
		t.Helper()
		if err := raw.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	old := n.current()
	kill()
	eventually(t, 5*time.Second, "the reader sees the kill", func() bool { return n.current() != old })
	if ext, err := n.Extend(ctx, "k", "a", time.Minute, ""); err != nil || ext <= 0 {
		t.Fatalf("extend after the kill: %v, %v", ext, err)
	}
	for i := range 20 {
		kill()
		ext, err := n.Extend(ctx, "k", "a", time.Minute, "")
		if err == nil && ext <= 0 {
			t.Fatalf("extend %d racing a kill answered %v without an error", i, ext)
		}
		if ext, err := n.Extend(ctx, "k", "a", time.Minute, ""); err != nil || ext <= 0 {
			t.Fatalf("extend after extend %d racing a kill: %v, %v", i, ext, err)
		}
	}
	if err := raw.ConfigSet(ctx, "timeout", "1").Err(); err != nil {
		t.Fatal(err)
	}
	old = n.current()
	eventually(t, 5*time.Second, "the node's idle timeout closes the connection", func() bool { return n.current() != old })
	if ext, err := n.Extend(ctx, "k", "a", time.Minute, ""); err != nil || ext <= 0 {
		t.Fatalf("extend after the idle timeout: %v, %v", ext, err)
	}
}

// TestBigAndSmallBatchesInterleaved: callers with arguments larger than
// bigWrite (written by a goroutine of their own) and small ones, at once,
// over several batches in flight: each caller gets its own reply.
func TestBigAndSmallBatchesInterleaved(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: 3, MaxBatch: 4})
	echo := admitted(t, `return {ARGV[2], #ARGV[1]}`)
	ctx := testCtx(t)
	const callers, each = 12, 15
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				size := 10
				if (g+i)%3 == 0 {
					size = bigWrite + 1 + g*1000
				}
				tag := fmt.Sprintf("caller %d call %d", g, i)
				r := evalOn(ctx, n, echo, nil, []string{strings.Repeat("y", size), tag})
				if r.Err != nil {
					t.Errorf("%s: %v", tag, r.Err)
					return
				}
				a := r.Value.Array
				if len(a) != 2 || a[0].Kind != luascript.Bulk || a[0].Str != tag || a[1].Kind != luascript.Int || a[1].Int != int64(size) {
					t.Errorf("%s (%d bytes) got %+v", tag, size, r.Value)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCallerArrivingDuringADialKeepsItsTime: a dial on a slow link (a
// proxy adds 150 ms each way) started for a caller with a short deadline;
// a caller with plenty of time arrives while it is under way. The first
// caller's deadline passes before the node answers; the second must still
// get its reply, not the first one's timeout.
func TestCallerArrivingDuringADialKeepsItsTime(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	p, err := netfault.Listen(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetDelay(150 * time.Millisecond)
	n := newNode(t, RedisOptions{Addr: p.Addr()})
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	done := make(quorum.Replies, 2)
	n.Do(short, &quorum.Op{Kind: quorum.OpInspect, Key: "k"}, 1, done)
	time.Sleep(10 * time.Millisecond) // the dial is under way
	n.Do(testCtx(t), &quorum.Op{Kind: quorum.OpInspect, Key: "k"}, 2, done)
	for range 2 {
		r := <-done
		t.Logf("call %d: %v", r.Tag, r.Err)
		if r.Tag == 2 && r.Err != nil {
			t.Errorf("the caller with time left failed with the dial started for a shorter one: %v", r.Err)
		}
	}
}

// TestLateReplyInABatchWithALaterDeadline: two calls in one batch (queued
// behind a first one), a script that keeps the node busy past its own
// deadline and an acquire with time left: the batch is bounded by the
// later deadline, and its replies come in time for the acquire only. The
// script's call fails (unknown outcome), the acquire is answered.
func TestLateReplyInABatchWithALaterDeadline(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr(), Pipelines: 1})
	busy := admitted(t, `local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
while true do
  local now = redis.call('TIME')
  if now[1] * 1000000 + now[2] - start > 600000 then return 1 end
end`)
	ctx := testCtx(t)
	if r := evalOn(ctx, n, busy, nil, nil); r.Err != nil { // loads it
		t.Fatal(r.Err)
	}
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	done := make(quorum.Replies, 3)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: "k0"}, 0, done)
	n.Do(short, &quorum.Op{Kind: quorum.OpEval, Script: busy}, 1, done)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k2", Hold: hold("a", time.Minute)}, 2, done)
	for range 3 {
		r := <-done
		t.Logf("call %d: %v", r.Tag, r.Err)
		switch {
		case r.Tag == 1 && r.Err == nil:
			t.Errorf("the call whose deadline passed before its batch's replies came was answered %+v", r.Value)
		case r.Tag != 1 && r.Err != nil:
			t.Errorf("call %d with time left: %v", r.Tag, r.Err)
		}
	}
}
