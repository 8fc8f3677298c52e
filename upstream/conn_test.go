package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/quorum"
)

// current is the node's connection for its scripts (nil: none now).
func (n *RedisNode) current() *nodeConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conn
}

// doOn runs op on n and returns the node's reply as Do delivers it.
func doOn(ctx context.Context, n *RedisNode, op *quorum.Op) quorum.Reply {
	done := make(quorum.Replies, 1)
	n.Do(ctx, op, 0, done)
	return <-done
}

// TestRepliesReachTheirCallers: many callers at once, over several batches
// in flight, small batches, NOSCRIPT re-sends (the node's scripts flushed
// meanwhile) and calls given up before they go out: every reply a caller
// gets is the reply to its own call.
func TestRepliesReachTheirCallers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx := testCtx(t)
		n, raw := newNode(t, RedisOptions{Addr: addr, Pipelines: 3, MaxBatch: 5}), rawClient(t, addr)
		echo := admitted(t, `return {ARGV[1], redis.call('INCR', KEYS[1])}`)
		const callers, each = 32, 40
		var answered, gaveUp atomic.Int64
		flushing := make(chan struct{})
		go func() { // bounded: each flush waits for its reply
			defer close(flushing)
			for range 20 {
				if err := raw.ScriptFlush(ctx).Err(); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for i := range each {
					arg, key := fmt.Sprintf("caller %d call %d", g, i), fmt.Sprintf("count:%d", g)
					cctx := ctx
					if i%7 == 3 {
						var cancel context.CancelFunc
						cctx, cancel = context.WithCancel(ctx)
						cancel() // given up before it goes out
					}
					r := evalOn(cctx, n, echo, []string{key}, []string{arg})
					if r.Err != nil {
						if i%7 != 3 {
							t.Errorf("%s: %v", arg, r.Err)
						}
						gaveUp.Add(1)
						continue
					}
					a := r.Value.Array
					if len(a) != 2 || a[0].Kind != luascript.Bulk || a[0].Str != arg || a[1].Kind != luascript.Int {
						t.Errorf("%s got %+v", arg, r.Value)
						continue
					}
					answered.Add(1)
				}
			})
		}
		wg.Wait()
		<-flushing
		if answered.Load() == 0 || answered.Load()+gaveUp.Load() != callers*each {
			t.Errorf("%d answered, %d gave up, of %d", answered.Load(), gaveUp.Load(), callers*each)
		}
		// Each caller's counter went up once per call that ran: no reply
		// was lost or answered twice.
		for g := range callers {
			r := evalOn(ctx, n, echo, []string{fmt.Sprintf("count:%d", g)}, []string{"last"})
			if r.Err != nil || len(r.Value.Array) != 2 {
				t.Fatalf("last: %+v", r)
			}
		}
		t.Logf("%d calls answered in %d round trips", answered.Load(), n.Stats().RoundTrips)
	})
}

// TestPausedNodeMidBatch: a node stopped (SIGSTOP) with a batch unanswered
// gives its calls an error once their deadline passes, never a guess; the
// connection is closed and not used again, so that the stopped node's
// late replies, once it runs again, reach no later call.
func TestPausedNodeMidBatch(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	old := n.current()
	if old == nil {
		t.Fatal("no connection after a call")
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume() // if the test ends before it resumes the node (SIGCONT to a running one does nothing)
	short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	done := make(quorum.Replies, 2)
	n.Do(short, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute)}, 1, done)
	// A second call, with a later deadline, queued behind the first.
	later, cancel2 := context.WithTimeout(t.Context(), 400*time.Millisecond)
	defer cancel2()
	n.Do(later, &quorum.Op{Kind: quorum.OpAcquire, Key: "k2", Hold: hold("b", time.Minute)}, 2, done)
	for range 2 {
		select {
		case r := <-done:
			if r.Err == nil {
				t.Errorf("call %d on a stopped node answered %+v, want an error", r.Tag, r)
			}
		case <-time.After(testTimeout):
			t.Fatal("a call on a stopped node got no reply after its deadline passed")
		}
	}
	if cn := n.current(); cn == old {
		t.Fatal("the connection that timed out with replies unread is still the node's")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	// The node now runs what it had read (the acquires of k, perhaps k2)
	// and answers on the closed connection. Later calls go on a new one
	// and get their own replies.
	for i := range 20 {
		key := fmt.Sprint("free", i)
		e, held, err := n.Inspect(testCtx(t), key)
		if err != nil || held {
			t.Fatalf("Inspect(%s) after the node ran again = %+v, %v, %v; want free", key, e, held, err)
		}
	}
	if cn := n.current(); cn == nil || cn == old {
		t.Fatalf("connection after the node ran again: %p, the old one %p", cn, old)
	}
}

// TestKilledNodeReconnects: a node killed while its connection is idle is
// noticed by the connection's reader at once; once the node runs again,
// the first call succeeds on a new connection, and its reply carries the
// run id of the new process.
func TestKilledNodeReconnects(t *testing.T) {
	s := redistest.Start(t, redistest.Options{AppendFsyncAlways: true})
	n, ctx := newNode(t, RedisOptions{Addr: s.Addr()}), testCtx(t)
	first := doOn(ctx, n, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute)})
	if first.Err != nil || first.Incarnation == "" {
		t.Fatalf("first acquire: %+v", first)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the reader notices the node closed its connection", func() bool {
		return n.current() == nil
	})
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	r := doOn(ctx, n, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute)})
	if r.Err != nil || r.Claim.State != quorum.Mine {
		t.Fatalf("first acquire after the restart: %+v", r)
	}
	if r.Incarnation == "" || r.Incarnation == first.Incarnation || r.Incarnation != n.Incarnation() {
		t.Errorf("reply after restart from %q, before %q, node's newest %q", r.Incarnation, first.Incarnation, n.Incarnation())
	}
}

// TestNodeAuthAndDatabase: the node's connection authenticates with the
// password and selects the database; a wrong password is the node's
// refusal, and the call fails.
func TestNodeAuthAndDatabase(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t)
	if err := rawClient(t, s.Addr()).ConfigSet(ctx, "requirepass", "sesame").Err(); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, RedisOptions{Addr: s.Addr(), Password: "sesame", DB: 3})
	mustAcquire(t, n, "k", hold("a", time.Minute))
	if r := doOn(ctx, n, &quorum.Op{Kind: quorum.OpInspect, Key: "k"}); r.Err != nil || r.Incarnation == "" {
		t.Fatalf("inspect: %+v", r)
	}
	raw := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "sesame", DB: 3, MaxRetries: -1})
	defer raw.Close()
	if got, err := raw.Get(ctx, "k").Result(); err != nil || got != "a" {
		t.Errorf("key k in db 3 = %q, %v", got, err)
	}
	wrong := newNode(t, RedisOptions{Addr: s.Addr(), Password: "open"})
	_, err := wrong.Acquire(ctx, "k", hold("b", time.Minute))
	if err == nil || !errors.As(err, new(*NodeError)) {
		t.Errorf("acquire with a wrong password = %v, want the node's refusal", err)
	}
}

// TestBigWriteOnStoppedNode: a batch larger than the socket's buffers, to
// a node stopped (SIGSTOP) that reads none of it, does not hold up the
// caller of Do, which returns before the call is answered (a fan-out goes
// on to the other nodes); the call fails once its deadline passes, and
// the node works again once it runs.
func TestBigWriteOnStoppedNode(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	mustAcquire(t, n, "warm", hold("a", time.Minute))
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume() // if the test ends before it resumes the node (SIGCONT to a running one does nothing)
	big := strings.Repeat("x", 8<<20)
	echo := admitted(t, `return #ARGV[1]`)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	done := make(quorum.Replies, 1)
	start := time.Now()
	n.Do(ctx, &quorum.Op{Kind: quorum.OpEval, Script: echo, Args: []string{big}}, 0, done)
	took := time.Since(start)
	select {
	case r := <-done:
		t.Fatalf("Do returned only once the call was answered (%v, after %v)", r.Err, took)
	default:
	}
	if took > 1500*time.Millisecond {
		t.Errorf("Do took %v with a stopped node", took)
	}
	if r := <-done; r.Err == nil {
		t.Errorf("the big call on a stopped node answered %+v", r.Value)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	r := evalOn(testCtx(t), n, echo, nil, []string{big})
	if r.Err != nil || r.Value.Int != int64(len(big)) {
		t.Fatalf("the big call once the node runs: %+v", r)
	}
}

// TestIdleConnectionOutlivesItsLastDeadline: the read deadline of the last
// batch stays set once the connection is idle (one change of it a batch);
// when it passes with nothing awaited, the reader sets the next one and
// keeps the connection, and a later call goes out on it.
func TestIdleConnectionOutlivesItsLastDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		// Timeout bounds the dial and each round trip too: far above
		// either on a loaded machine (50 ms failed the first call's dial,
		// "i/o timeout", at a load of 8).
		const timeout = time.Second
		n := newNode(t, RedisOptions{Addr: addr, Timeout: timeout})
		ctx := testCtx(t)
		if r := doOn(ctx, n, &quorum.Op{Kind: quorum.OpInspect, Key: "k"}); r.Err != nil {
			t.Fatal(r.Err)
		}
		cn := n.current()
		time.Sleep(timeout + timeout/2) // the last batch's deadline passes while idle
		if got := n.current(); got != cn {
			t.Fatalf("the idle connection was dropped at its last batch's deadline (now %p, was %p)", got, cn)
		}
		if r := doOn(ctx, n, &quorum.Op{Kind: quorum.OpInspect, Key: "k"}); r.Err != nil {
			t.Fatal(r.Err)
		}
		if got := n.current(); got != cn {
			t.Fatalf("the next call dialled a new connection")
		}
	})
}
