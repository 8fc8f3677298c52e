package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on the expiry of a pipelined batch whose deadline passed while a
// batch behind it still had time (rearm): the expired batch's replies,
// read later in their turn and dropped, must never reach another batch's
// calls, and no call is answered twice.

// countingSink records every reply put to it, by tag, and passes it on.
type countingSink struct {
	mu   sync.Mutex
	puts map[int]int
	ch   chan quorum.Reply
}

func newCountingSink(n int) *countingSink {
	return &countingSink{puts: map[int]int{}, ch: make(chan quorum.Reply, 4*n)}
}

func (s *countingSink) Put(r quorum.Reply) {
	s.mu.Lock()
	s.puts[r.Tag]++
	s.mu.Unlock()
	s.ch <- r
}

func (s *countingSink) twice() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var tags []int
	for tag, k := range s.puts {
		if k > 1 {
			tags = append(tags, tag)
		}
	}
	return tags
}

// sendBatch queues ops (tags from tag0) with ctx and has them go out as
// one batch on n's connection, which must have room for it.
func sendBatch(t *testing.T, n *RedisNode, ctx context.Context, tag0 int, done quorum.Sink, ops ...*quorum.Op) {
	t.Helper()
	n.mu.Lock()
	if n.conn == nil || len(n.conn.pending) >= n.pipelines || len(n.queue) > 0 {
		n.mu.Unlock()
		t.Fatal("no room for a batch of its own")
	}
	for i, op := range ops {
		n.queue = append(n.queue, &call{ctx: ctx, op: op, tag: tag0 + i, done: done})
	}
	n.dispatch(nil)
}

// TestAttack3ExpiredBatchRepliesStayItsOwn: three batches in flight on a
// stopped node, the first with a short deadline and its own calls in a
// group with a call failing in it (WRONGTYPE), a client script and a
// clockless batch (a release only) behind it, then one with a group, a
// client script and an inspect. The first expires while the node is
// stopped; once the node runs, its replies are read and dropped, and every
// call behind it gets its own reply, each exactly once. With flush set the
// node lost every script: the expired batch's NOSCRIPT replies are not
// sent again (its calls failed already: nothing of them may run after),
// the others' are, and run once.
func TestAttack3ExpiredBatchRepliesStayItsOwn(t *testing.T) {
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprint("flush=", flush), func(t *testing.T) {
			s := redistest.Start(t, redistest.Options{})
			expiredBatchRepliesStayItsOwn(t, s, RedisOptions{Addr: s.Addr()}, flush)
		})
	}
}

// The same over TLS: the reads that time out while a batch behind has time
// leave the TLS connection in step.
func TestAttack3ExpiredBatchRepliesStayItsOwnTLS(t *testing.T) {
	s, cfg := tlsRedis(t)
	expiredBatchRepliesStayItsOwn(t, s, RedisOptions{Addr: s.Addr(), TLSConfig: cfg}, false)
}

// expiredBatchRepliesStayItsOwn runs the attack on s through a node made
// with o (Pipelines 4); flush: the node lost every script first.
func expiredBatchRepliesStayItsOwn(t *testing.T, s *redistest.Server, o RedisOptions, flush bool) {
	o.Pipelines = 4
	n := newNode(t, o)
	var raw *redis.Client
	if o.TLSConfig == nil {
		raw = rawClient(t, s.Addr())
	} else {
		raw = redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: o.TLSConfig})
		t.Cleanup(func() { _ = raw.Close() })
	}
	echo := admitted(t, `return 'echo:' .. ARGV[1]`)
	setUp, _ := opsWithAnError(n)
	setUp(t, raw)
	mustAcquire(t, n, "rel", hold("r", time.Minute))
	if r := evalOn(testCtx(t), n, echo, nil, []string{"load"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := raw.ScriptLoad(t.Context(), opsScript.src).Err(); err != nil { // groups run by SHA
		t.Fatal(err)
	}
	for _, op := range []*quorum.Op{{Kind: quorum.OpRelease, Key: "none", Token: "x"}, {Kind: quorum.OpInspect, Key: "none"}} {
		if r := doOn(testCtx(t), n, op); r.Err != nil { // loads its script: no NOSCRIPT re-send reorders them
			t.Fatal(r.Err)
		}
	}
	if flush {
		if err := raw.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume() // SIGCONT to a running one does nothing
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	long, cancel2 := context.WithTimeout(t.Context(), time.Minute) // Timeout (5 s) bounds it
	defer cancel2()
	done := newCountingSink(16)
	// A: tags 0-4, expires.
	sendBatch(t, n, short, 0, done,
		&quorum.Op{Kind: quorum.OpAcquire, Key: "ka", Hold: hold("A", time.Minute), Attempt: "aa"},
		&quorum.Op{Kind: quorum.OpLeave, Key: "bad", Token: "w"}, // WRONGTYPE in the group
		&quorum.Op{Kind: quorum.OpInspect, Key: "rel"},
		&quorum.Op{Kind: quorum.OpEval, Script: echo, Args: []string{"A"}},
		&quorum.Op{Kind: quorum.OpAcquire, Key: "ka2", Hold: hold("A", time.Minute), Attempt: "aa2"},
	)
	// B: tag 10, clockless.
	sendBatch(t, n, long, 10, done, &quorum.Op{Kind: quorum.OpRelease, Key: "rel", Token: "r"})
	// C: tags 20-23.
	sendBatch(t, n, long, 20, done,
		&quorum.Op{Kind: quorum.OpEval, Script: echo, Args: []string{"C"}},
		&quorum.Op{Kind: quorum.OpAcquire, Key: "kc", Hold: hold("C", time.Minute), Attempt: "ac"},
		&quorum.Op{Kind: quorum.OpInspect, Key: "kc"},
		&quorum.Op{Kind: quorum.OpInspect, Key: "rel"},
	)
	got := map[int]quorum.Reply{}
	for range 5 { // A's, while the node is stopped
		select {
		case r := <-done.ch:
			if r.Tag >= 10 || !errors.Is(r.Err, context.DeadlineExceeded) {
				t.Fatalf("while the node is stopped: call %d: %+v", r.Tag, r)
			}
		case <-time.After(testTimeout):
			t.Fatal("the expired batch's calls did not fail")
		}
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		select {
		case r := <-done.ch:
			got[r.Tag] = r
		case <-time.After(testTimeout):
			t.Fatalf("calls answered: %v, want 10 and 20-23", got)
		}
	}
	if r := got[10]; r.Err != nil || !r.OK {
		t.Errorf("B's release: %+v, want it released", r)
	}
	if r := got[20]; r.Err != nil || r.Value.Str != "echo:C" {
		t.Errorf("C's script: %+v, want echo:C", r)
	}
	if r := got[21]; r.Err != nil || r.Claim.State != quorum.Acquired {
		t.Errorf("C's acquire: %+v, want acquired", r)
	}
	if r := got[22]; r.Err != nil || !r.OK || r.Entry.Token != "C" {
		t.Errorf("C's inspect of kc: %+v, want held by C", r)
	}
	if r := got[23]; r.Err != nil || r.OK {
		t.Errorf("C's inspect of rel: %+v, want free (B released it)", r)
	}
	ctx := testCtx(t)
	for i := range 5 { // the connection stays in step
		if _, held, err := n.Inspect(ctx, fmt.Sprint("free", i)); err != nil || held {
			t.Fatalf("Inspect(free%d) = %v, %v", i, held, err)
		}
	}
	e, held, err := n.Inspect(ctx, "ka")
	if err != nil {
		t.Fatal(err)
	}
	if flush && held {
		t.Errorf("the expired batch's acquire, answered NOSCRIPT, ran after its call failed: %+v", e)
	}
	if !flush && !held {
		t.Errorf("the expired batch's acquire did not run (its replies were dropped, not its commands)")
	}
	select {
	case r := <-done.ch:
		t.Errorf("a reply more: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	if tags := done.twice(); len(tags) > 0 {
		t.Errorf("calls answered twice: %v", tags)
	}
}
