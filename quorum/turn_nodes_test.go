package quorum_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/netfault"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/upstream"
)

// stallBeforeScript is a node of an instance that stalls once it holds
// the turn: the first script it is sent under a turn goes through links
// that from then on deliver bytes late, as when the instance (or its
// network) pauses between taking the turn and sending the script.
type stallBeforeScript struct {
	quorum.Node
	links []*netfault.Proxy
	delay time.Duration
	armed *atomic.Bool
}

func (s *stallBeforeScript) Do(ctx context.Context, op *quorum.Op, tag int, done quorum.Sink) {
	if op.Kind == quorum.OpEval && op.Turn != "" && s.armed.Load() {
		for _, l := range s.links {
			l.SetDelay(s.delay)
		}
	}
	s.Node.Do(ctx, op, tag, done)
}

// TestTurnExpiredScriptRefused: instance A takes the turn on a key, then
// stalls past the turn's TTL before its script reaches the nodes (real
// redis-servers behind links that turn slow); instance B meanwhile takes
// the turn and runs its own script. A's script, landing afterwards, is
// refused by every node's guard: its client gets an error, never a
// guess, and no node runs it after B's (without the turn, every node
// held "ba").
func TestTurnExpiredScriptRefused(t *testing.T) {
	const limit = 200 * time.Millisecond // the turn lives limit + TurnMargin
	stall := limit + quorum.TurnMargin + time.Second
	servers := redistest.StartN(t, 3, redistest.Options{})
	var links []*netfault.Proxy
	for _, s := range servers {
		l, err := netfault.Listen(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		links = append(links, l)
	}
	var aNodes, bNodes []quorum.Node
	armed := new(atomic.Bool)
	for i, s := range servers {
		a := upstream.NewRedisNode(upstream.RedisOptions{Addr: links[i].Addr()})
		b := upstream.NewRedisNode(upstream.RedisOptions{Addr: s.Addr()})
		t.Cleanup(func() { a.Close(); b.Close() })
		aNodes = append(aNodes, &stallBeforeScript{Node: a, links: links, delay: stall, armed: armed})
		bNodes = append(bNodes, b)
	}
	cfg := quorum.Config{NodeTimeout: 5 * time.Second}
	ra, rb := quorum.New(aNodes, cfg), quorum.New(bNodes, cfg)
	t.Cleanup(func() { ra.Close(); rb.Close() })
	s, err := luascript.Admit([]byte(`return redis.call('APPEND', KEYS[1], ARGV[1])`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Both instances' connections open, and the nodes know the guarded
	// script (A's stalled EVALSHA must not come back NOSCRIPT).
	for _, r := range []*quorum.Redlock{ra, rb} {
		if _, err := r.Eval(ctx, s, []string{"warm"}, []string{"x"}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	aDone := make(chan error, 1)
	go func() {
		_, err := ra.Eval(ctx, s, []string{"k"}, []string{"a"}, limit)
		aDone <- err
	}()
	// B takes the turn once A's expired; A's script is still on its way.
	time.Sleep(limit / 2)
	started := time.Now()
	v, err := rb.Eval(ctx, s, []string{"k"}, []string{"b"}, 5*time.Second)
	if err != nil || v.Int != 1 {
		t.Fatalf("B: %+v %v", v, err)
	}
	var ee *luascript.EvalError
	if err := <-aDone; !errors.As(err, &ee) || ee.Turn != "" {
		t.Fatalf("A, stalled past its turn: %v, want the nodes' failure", err)
	}
	// A's script reaches the nodes stall after it was sent; wait past that.
	time.Sleep(time.Until(started.Add(stall + time.Second)))
	for i, srv := range servers {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		got, err := c.Get(ctx, "k").Result()
		c.Close()
		if err != nil || got != "b" {
			t.Errorf("node %d holds %q (%v), want only B's write", i, got, err)
		}
	}
}
