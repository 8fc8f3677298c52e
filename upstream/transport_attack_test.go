package upstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
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
	resumed := false
	defer func() {
		if !resumed {
			s.Resume()
		}
	}()
	long, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	short, cancel2 := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel2()
	done := make(chan quorum.Reply, 2)
	n.Do(long, &quorum.Op{Kind: quorum.OpAcquire, Key: "k1", Hold: hold("a", time.Minute)}, 1, done)
	n.Do(short, &quorum.Op{Kind: quorum.OpAcquire, Key: "k2", Hold: hold("b", time.Minute)}, 2, done)
	<-short.Done()
	time.Sleep(100 * time.Millisecond)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
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
