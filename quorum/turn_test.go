package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/luascript"
)

// turnNode keeps turns as turn.lua and turnback.lua do, and runs an
// OpEval guarded by its turn as the guard does, recording ARGV[1] of each
// script it ran.
type turnNode struct {
	mu    sync.Mutex
	turns map[string]string
	ran   []string
	takes int
}

func newTurnNodes(n int) []*turnNode {
	out := make([]*turnNode, n)
	for i := range out {
		out[i] = &turnNode{turns: map[string]string{}}
	}
	return out
}

func (n *turnNode) String() string { return "turn-node" }

func (n *turnNode) set(key, token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if token == "" {
		delete(n.turns, key)
	} else {
		n.turns[key] = token
	}
}

// allHold reports whether every node holds key's turn for token.
func allHold(nodes []*turnNode, key, token string) bool {
	for _, n := range nodes {
		n.mu.Lock()
		v := n.turns[key]
		n.mu.Unlock()
		if v != token {
			return false
		}
	}
	return true
}

func (n *turnNode) state() (ran []string, turns int, takes int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.ran), len(n.turns), n.takes
}

func (n *turnNode) Do(ctx context.Context, op *Op, tag int, done Sink) {
	go func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		r := Reply{Tag: tag}
		switch op.Kind {
		case OpTurn:
			n.takes++
			r.OK = true
			for _, k := range op.Keys {
				if v, ok := n.turns[k]; ok && v != op.Token {
					r.OK = false
				}
			}
			if r.OK {
				for _, k := range op.Keys {
					n.turns[k] = op.Token
				}
			}
		case OpTurnBack:
			for _, k := range op.Keys {
				if n.turns[k] == op.Token {
					delete(n.turns, k)
				}
			}
		case OpEval:
			for _, k := range TurnKeys(op.Keys) {
				if op.Turn != "" && n.turns[k] != op.Turn {
					r.Err = ErrTurnLost
				}
			}
			if r.Err == nil {
				n.ran = append(n.ran, op.Args[0])
				r.Value = intR(int64(len(n.ran)))
			}
		case OpKill:
			r.OK = true
		}
		done.Put(r)
	}()
}

func turnRedlock(nodes []*turnNode) *Redlock {
	ns := make([]Node, len(nodes))
	for i, n := range nodes {
		ns[i] = n
	}
	return New(ns, Config{NodeTimeout: 2 * time.Second})
}

var writes = &luascript.Admitted{SHA: "w", Writes: true}

// settled waits until every script's turn was given back (its nodes all
// decided and answered), then closes r.
func settled(t *testing.T, r *Redlock) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r.turns.mu.Lock()
		n := len(r.turns.slots)
		r.turns.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys' turns still held", n)
		}
	}
	r.Close()
}

// turnsGivenBack waits until no node holds a turn: settled sees the
// instance's own record of its turns empty, but each node's give-back is
// sent by that node's dispatch goroutine once its call landed
// (dispatchTurn), which Close does not wait for and a busy machine may run
// later.
func turnsGivenBack(t *testing.T, nodes []*turnNode) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		held := 0
		for _, n := range nodes {
			_, turns, _ := n.state()
			held += turns
		}
		if held == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d turns still held on the nodes", held)
		}
	}
}

// TestTurnGivesUp: while another token holds the turn on a majority, a
// script that writes is retried until its time limit and then refused
// with NOQUORUM's words for it; it ran nowhere, and every attempt's
// turns were given back.
func TestTurnGivesUp(t *testing.T) {
	nodes := newTurnNodes(3)
	nodes[0].set("k", "other")
	nodes[1].set("k", "other")
	r := turnRedlock(nodes)
	start := time.Now()
	_, err := r.Eval(context.Background(), writes, []string{"k"}, []string{"x"}, 200*time.Millisecond)
	took := time.Since(start)
	var ee *luascript.EvalError
	if !errors.As(err, &ee) || ee.Turn == "" || !strings.Contains(err.Error(), "could not take the turn on the script's keys on a majority of nodes (2 of 3) within the script time limit (200 ms)") ||
		!strings.Contains(err.Error(), "2 were in another script's turn, 0 failed") {
		t.Fatalf("err %v", err)
	}
	if took < 100*time.Millisecond {
		t.Fatalf("gave up after %v, well before the 200ms limit", took)
	}
	r.Close() // waits for the give-backs
	for i, n := range nodes {
		ran, turns, takes := n.state()
		if len(ran) != 0 {
			t.Fatalf("node %d ran %v", i, ran)
		}
		if want := map[bool]int{true: 1, false: 0}[i < 2]; turns != want {
			t.Fatalf("node %d holds %d turns, want %d (the other token's)", i, turns, want)
		}
		if takes < 3 {
			t.Fatalf("node %d was asked %d times: no retries", i, takes)
		}
	}
}

// TestTurnRefusedNodeAskedAgain: a node that another attempt held for a
// moment is asked again while the majority's turns hold, so the script
// runs on every node, not only the majority.
func TestTurnRefusedNodeAskedAgain(t *testing.T) {
	nodes := newTurnNodes(3)
	nodes[2].set("k", "other")
	go func() {
		time.Sleep(30 * time.Millisecond)
		nodes[2].set("k", "")
	}()
	r := turnRedlock(nodes)
	if v, err := r.Eval(context.Background(), writes, []string{"k"}, []string{"x"}, 5*time.Second); err != nil || v.Int != 1 {
		t.Fatalf("got %+v, %v", v, err)
	}
	settled(t, r)
	turnsGivenBack(t, nodes)
	for i, n := range nodes {
		if ran, turns, _ := n.state(); len(ran) != 1 || turns != 0 {
			t.Fatalf("node %d ran %v and holds %d turns", i, ran, turns)
		}
	}
}

// TestTurnLostIsNotAReply: nodes whose turn is gone when the script
// arrives (expired, as for a paused instance) count as failures; without
// a majority of replies the client gets NOQUORUM, never a guess.
func TestTurnLostIsNotAReply(t *testing.T) {
	nodes := newTurnNodes(3)
	r := turnRedlock(nodes)
	op := &Op{Kind: OpEval, Script: writes, Keys: []string{"k"}, Args: []string{"x"}}
	t1, err := r.enterTurn(context.Background(), op.Keys, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// enterTurn returns once a majority gave the turn; the third node's
	// may still be on its way, and would land after the changes below.
	eventually(t, 10*time.Second, "every node gave the turn", func() bool { return allHold(nodes, "k", t1.token) })
	nodes[0].set("k", "")
	nodes[1].set("k", "someone else")
	op.Turn, op.turn = t1.token, t1
	sel := newSelection(r.quorum, 3, false)
	if _, err := r.fanout(context.Background(), time.Second, op, nil, sel.add); err != nil {
		t.Fatal(err)
	}
	if _, ok := sel.answer(); ok || sel.failed != 2 || !errors.Is(errors.Join(sel.errs...), ErrTurnLost) {
		t.Fatalf("answered %d, failed %d: %v", sel.answered, sel.failed, sel.errs)
	}
	settled(t, r)
	if ran, _, _ := nodes[0].state(); len(ran) != 0 {
		t.Fatalf("node 0 ran %v without its turn", ran)
	}
}

// TestTurnOneInstanceQueues: one instance's concurrent scripts on a key
// take the turn one after the other, and every node runs them all in the
// same order (the next one may find the last node still in the previous
// script's turn, and asks it again).
func TestTurnOneInstanceQueues(t *testing.T) {
	nodes := newTurnNodes(3)
	r := turnRedlock(nodes)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := r.Eval(context.Background(), writes, []string{"k", "k2"}, []string{fmt.Sprint(i)}, 5*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	settled(t, r)
	turnsGivenBack(t, nodes)
	first, _, _ := nodes[0].state()
	for i, n := range nodes {
		ran, turns, takes := n.state()
		if len(ran) != 20 || !slices.Equal(ran, first) || turns != 0 {
			t.Fatalf("node %d ran %v (node 0: %v), holds %d turns", i, ran, first, turns)
		}
		t.Logf("node %d: asked for the turn %d times for 20 scripts", i, takes)
	}
}

// TestTurnKeys: sorted, without repeats, the caller's slice unchanged.
func TestTurnKeys(t *testing.T) {
	in := []string{"b", "a", "b"}
	if got := TurnKeys(in); !slices.Equal(got, []string{"a", "b"}) || !slices.Equal(in, []string{"b", "a", "b"}) {
		t.Fatalf("%v %v", got, in)
	}
}
