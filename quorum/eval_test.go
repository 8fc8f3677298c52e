package quorum

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/luascript"
)

// scriptNode answers OpEval with a fixed reply or error, or never (hang:
// until its call's context ends), and counts the OpKills it gets.
type scriptNode struct {
	reply luascript.Reply
	err   error
	hang  bool
	delay time.Duration
	kills atomic.Int32
}

func (n *scriptNode) String() string { return "script-node" }

func (n *scriptNode) Do(ctx context.Context, op *Op, tag int, done Sink) {
	go func() {
		switch {
		case op.Kind == OpKill:
			n.kills.Add(1)
			done.Put(Reply{Tag: tag, OK: true})
		case n.hang:
			<-ctx.Done()
			done.Put(Reply{Tag: tag, Err: ctx.Err()})
		default:
			time.Sleep(n.delay)
			done.Put(Reply{Tag: tag, Value: n.reply, Err: n.err})
		}
	}()
}

func intR(n int64) luascript.Reply   { return luascript.Reply{Kind: luascript.Int, Int: n} }
func bulkR(s string) luascript.Reply { return luascript.Reply{Kind: luascript.Bulk, Str: s} }
func errR(s string) luascript.Reply  { return luascript.Reply{Kind: luascript.Error, Str: s} }
func arrR(e ...luascript.Reply) luascript.Reply {
	return luascript.Reply{Kind: luascript.Array, Array: e}
}

var errNodeDown = errors.New("connection refused")

func TestEvalReplySelection(t *testing.T) {
	plain := &luascript.Admitted{SHA: "x"}
	timed := &luascript.Admitted{SHA: "y", ReadsTime: true}
	for _, tc := range []struct {
		name   string
		script *luascript.Admitted
		nodes  []*scriptNode
		want   luascript.Reply
		err    string // a substring of the *EvalError's text; "" for a reply
	}{
		{"all agree", plain, []*scriptNode{{reply: intR(1)}, {reply: intR(1)}, {reply: intR(1)}}, intR(1), ""},
		{"majority", plain, []*scriptNode{{reply: intR(1)}, {reply: intR(0)}, {reply: intR(1)}}, intR(1), ""},
		{"majority despite a dead node", plain, []*scriptNode{{reply: bulkR("t")}, {err: errNodeDown}, {reply: bulkR("t")}}, bulkR("t"), ""},
		{"same error from a majority", plain, []*scriptNode{{reply: errR("WRONGTYPE x")}, {reply: intR(1)}, {reply: errR("WRONGTYPE x")}}, errR("WRONGTYPE x"), ""},
		{"no majority", plain, []*scriptNode{{reply: intR(1)}, {reply: intR(2)}, {reply: errR("ERR x")}}, luascript.Reply{}, "the nodes disagreed: at most 1 of 3 gave the same reply, 2 needed"},
		{"too few answers", plain, []*scriptNode{{reply: intR(1)}, {err: errNodeDown}, {err: errNodeDown}}, luascript.Reply{}, " of 3 nodes answered, 2 needed"}, // the decision may come before the live node answers
		{"times differ, not read", plain, []*scriptNode{{reply: intR(4990)}, {reply: intR(4995)}, {reply: intR(4980)}}, luascript.Reply{}, "disagreed"},
		{"times: the smallest of the majority", timed, []*scriptNode{{reply: intR(4990)}, {reply: intR(4995)}, {err: errNodeDown}}, intR(4990), ""},
		{"times: an exact majority wins", timed, []*scriptNode{{reply: intR(100), delay: 100 * time.Millisecond}, {reply: intR(5000)}, {reply: intR(5000)}}, intR(5000), ""},
		{"times in arrays", timed, []*scriptNode{{reply: arrR(bulkR("t"), intR(30))}, {reply: arrR(bulkR("t"), intR(20))}, {reply: arrR(bulkR("u"), intR(10))}},
			arrR(bulkR("t"), intR(20)), ""},
		{"times: held on one, free on two", timed, []*scriptNode{{reply: intR(4990)}, {reply: intR(-2)}, {reply: intR(-2)}}, intR(-2), ""},
		{"times: sentinels must be equal", timed, []*scriptNode{{reply: intR(4990)}, {reply: intR(-2)}, {reply: intR(-1)}}, luascript.Reply{}, "disagreed"},
		{"times: other values must be equal", timed, []*scriptNode{{reply: arrR(bulkR("t"), intR(3))}, {reply: arrR(bulkR("u"), intR(3))}, {err: errNodeDown}}, luascript.Reply{}, "disagreed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := make([]Node, len(tc.nodes))
			for i, n := range tc.nodes {
				nodes[i] = n
			}
			r := New(nodes, Config{NodeTimeout: time.Second})
			defer r.Close()
			got, err := r.Eval(context.Background(), tc.script, []string{"k"}, nil, 5*time.Second)
			if tc.err != "" {
				var ee *luascript.EvalError
				if !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an *EvalError with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || encode(got, false) != encode(tc.want, false) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestEvalTimeLimitKillsBusyNodes: nodes that do not finish within the
// limit fail the call with an error that says so and get SCRIPT KILL; the
// one that answered does not.
func TestEvalTimeLimitKillsBusyNodes(t *testing.T) {
	nodes := []*scriptNode{{reply: intR(1)}, {hang: true}, {hang: true}}
	r := New([]Node{nodes[0], nodes[1], nodes[2]}, Config{NodeTimeout: time.Second})
	start := time.Now()
	_, err := r.Eval(context.Background(), &luascript.Admitted{}, nil, nil, 200*time.Millisecond)
	took := time.Since(start)
	var ee *luascript.EvalError
	if !errors.As(err, &ee) || ee.TimedOut != 2 || !strings.Contains(err.Error(), "2 did not finish within the script time limit (200 ms) and were sent SCRIPT KILL") {
		t.Fatalf("err %v", err)
	}
	if took < 200*time.Millisecond {
		t.Fatalf("returned after %v, before the limit", took)
	}
	r.Close() // waits for the kills
	if nodes[0].kills.Load() != 0 || nodes[1].kills.Load() != 1 || nodes[2].kills.Load() != 1 {
		t.Fatalf("kills %d %d %d, want 0 1 1", nodes[0].kills.Load(), nodes[1].kills.Load(), nodes[2].kills.Load())
	}
}

// TestEvalSlowMinorityKilledAfterAnswer: the answer comes from the
// majority at once; the node still busy at the limit is killed later.
func TestEvalSlowMinorityKilledAfterAnswer(t *testing.T) {
	nodes := []*scriptNode{{reply: intR(1)}, {reply: intR(1)}, {hang: true}}
	r := New([]Node{nodes[0], nodes[1], nodes[2]}, Config{NodeTimeout: time.Second})
	got, err := r.Eval(context.Background(), &luascript.Admitted{}, nil, nil, 300*time.Millisecond)
	if err != nil || got.Int != 1 {
		t.Fatalf("got %+v, %v", got, err)
	}
	for deadline := time.Now().Add(10 * time.Second); nodes[2].kills.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	r.Close()
	if nodes[2].kills.Load() != 1 || nodes[0].kills.Load() != 0 {
		t.Fatalf("kills %d %d", nodes[0].kills.Load(), nodes[2].kills.Load())
	}
}

// orderNode runs each OpEval after a delay that depends on its first
// argument, concurrently (as a node's several pipeline workers may), and
// records the order in which the calls ran.
type orderNode struct {
	delay func(arg string) time.Duration
	mu    sync.Mutex
	ran   []string
}

func (n *orderNode) String() string { return "order-node" }

func (n *orderNode) Do(ctx context.Context, op *Op, tag int, done Sink) {
	go func() {
		if op.Kind == OpKill {
			done.Put(Reply{Tag: tag, OK: true})
			return
		}
		select {
		case <-time.After(n.delay(op.Args[0])):
		case <-ctx.Done():
			done.Put(Reply{Tag: tag, Err: ctx.Err()})
			return
		}
		n.mu.Lock()
		n.ran = append(n.ran, op.Args[0])
		n.mu.Unlock()
		done.Put(Reply{Tag: tag, Value: intR(1)})
	}()
}

func (n *orderNode) order() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Join(n.ran, ",")
}

// TestEvalSameKeyInOrderOnEachNode: a script that got its majority's reply
// while one node is slow is still run first on that node by the next
// script on the same key; a script on another key does not wait; once all
// landed, nothing is remembered.
func TestEvalSameKeyInOrderOnEachNode(t *testing.T) {
	fast := func(string) time.Duration { return 0 }
	slow := &orderNode{delay: func(a string) time.Duration {
		if a == "first" {
			return time.Second // later calls would overtake it
		}
		return 0
	}}
	nodes := []*orderNode{{delay: fast}, {delay: fast}, slow}
	r := New([]Node{nodes[0], nodes[1], nodes[2]}, Config{NodeTimeout: 5 * time.Second})
	defer r.Close()
	ctx := context.Background()
	s := &luascript.Admitted{}
	for _, c := range []struct{ key, arg string }{{"k", "first"}, {"other", "elsewhere"}, {"k", "second"}, {"k", "third"}} {
		if _, err := r.Eval(ctx, s, []string{c.key, "shared-channel-" + c.key}, []string{c.arg}, 5*time.Second); err != nil {
			t.Fatalf("%s: %v", c.arg, err)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); r.order.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.order.pending(); n != 0 {
		t.Fatalf("%d keys still remembered after every call landed", n)
	}
	if got := slow.order(); got != "elsewhere,first,second,third" {
		t.Fatalf("slow node ran %s, want elsewhere,first,second,third (other key at once, same key in order)", got)
	}
	for i, n := range nodes[:2] {
		if got := strings.Replace(n.order(), "elsewhere,", "", 1); strings.TrimSuffix(got, ",elsewhere") != "first,second,third" {
			t.Fatalf("node %d ran %s", i, n.order())
		}
	}
}

// TestEvalOrderWaitIsNotATimeout: a call held back behind a script still
// running on its node past the time limit is never sent there; it fails
// with ErrOrderWait, and only the busy script's node gets SCRIPT KILL for
// the script that did time out.
func TestEvalOrderWaitIsNotATimeout(t *testing.T) {
	nodes := []*scriptNode{{reply: intR(1)}, {reply: intR(1)}, {hang: true}}
	r := New([]Node{nodes[0], nodes[1], nodes[2]}, Config{NodeTimeout: 5 * time.Second})
	ctx := context.Background()
	s := &luascript.Admitted{}
	if _, err := r.Eval(ctx, s, []string{"k"}, nil, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Eval(ctx, s, []string{"k"}, nil, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); r.order.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	r.Close()
	if k := nodes[2].kills.Load(); k != 1 {
		t.Fatalf("%d SCRIPT KILLs to the hanging node, want 1 (the second script never reached it)", k)
	}
}
