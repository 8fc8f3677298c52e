package quorum

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/luascript"
)

// Scripts outside lockproxy's catalog (luascript.Admit let them through)
// run unchanged on every node, atomically on each, Redlock-style: the
// client gets the reply a majority of nodes gave.
//
// Reply selection. Replies agree when they are equal (same RESP type and
// value, arrays element by element; an error reply is a reply). The reply
// that a majority (N/2+1) of the nodes gave is the answer. A script that
// reads a remaining time (TTL, PTTL, EXPIRETIME, PEXPIRETIME) gets replies
// that differ by the milliseconds between the nodes' runs; for it, replies
// also agree when they differ only in integers that are all positive, and
// the answer takes, at each such place, the smallest value among the
// majority that agreed. The smallest remaining time is the conservative
// one: a lock is held by a majority until the majority's shortest hold
// ends — the N/2+1-th longest of the nodes' times is never shorter than
// the least of any majority's — so a holder that stops by then never
// outlives its lock; a caller who reads "held" and waits for it to end
// waits no less than it would for a single Redis. Integers that are zero
// or negative (-1 no expiry, -2 no key, a script's own codes) must be
// equal. Without a majority, the reply is a *luascript.EvalError, never a guess.
//
// What a write does on a minority of nodes stays there: a script has no
// undo that lockproxy could run. The nodes that ran it keep its writes
// (expiring with the TTLs the script set); a client-side Redlock library
// in the same spot releases on every node, which a script caller does by
// running its own release script.

// Order on the nodes. Within one lockproxy instance, scripts that share a
// key (any of their KEYS) reach each node in the order Eval was called,
// one at a time: a script is not sent to a node before that node answered
// the previous script on the same key (or that call ended at its deadline,
// or failed). The reply still comes from the first majority: waiting for
// every live node before replying would make a slow or paused node cost
// every script its full time limit (the nodes' suspicion spares a
// suspected node's wait only for the reply, not for the node's queue),
// while the per-node order alone is what keeps the nodes' states from
// drifting apart under one instance's concurrent clients: each node runs
// that instance's scripts on a key in the same order. A node whose call
// timed out may still run that script later (Redis runs what it has read),
// and a script sent to it next then runs after it. Across instances, a
// script that writes runs on a node only in its turn (turn.go), which
// orders the scripts on a key alike on every node.

// ErrOrderWait is a node's failure for a script that was never sent to it:
// the node had not finished an earlier script on the same key within the
// script's time limit.
var ErrOrderWait = errors.New("not sent: the node had not finished an earlier script on the same key within the time limit")

// keyOrder remembers, per key and node, the last script call sent there:
// a channel closed once that call (and every call on the key before it on
// that node) has landed.
type keyOrder struct {
	mu    sync.Mutex
	tails map[string][]chan struct{}
}

// dispatch sends op to every node. An OpEval is sent to node i only once
// the calls before it on its keys landed on node i; the others at once.
func (r *Redlock) dispatch(ctx context.Context, op *Op, replies Sink) {
	if op.Kind == OpEval && op.turn != nil {
		r.dispatchTurn(ctx, op, replies)
		return
	}
	if op.Kind != OpEval || len(op.Keys) == 0 {
		for i, n := range r.nodes {
			n.Do(ctx, op, i, replies)
		}
		return
	}
	keys := uniqueKeys(op.Keys)
	preds, landed := r.order.enter(keys, len(r.nodes))
	for i, n := range r.nodes {
		own := make(Replies, 1)
		go func() {
			if !waitAll(ctx, preds[i]) {
				replies.Put(Reply{Tag: i, Err: ErrOrderWait})
			} else {
				n.Do(ctx, op, i, own)
				replies.Put(<-own)
			}
			// Landed only once the calls before it did too, so that a
			// call that failed before being sent does not let the next
			// one overtake them.
			for _, p := range preds[i] {
				<-p
			}
			r.order.leave(keys, i, landed[i])
		}()
	}
}

// waitAll waits until every channel in chs is closed, or ctx ends
// (false).
func waitAll(ctx context.Context, chs []chan struct{}) bool {
	for _, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func uniqueKeys(keys []string) []string {
	out := make([]string, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// enter makes a new call the last on keys on each of n nodes. It returns,
// per node, the calls it must wait for and the channel to close once it
// landed there.
func (o *keyOrder) enter(keys []string, n int) (preds [][]chan struct{}, landed []chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tails == nil {
		o.tails = map[string][]chan struct{}{}
	}
	preds, landed = make([][]chan struct{}, n), make([]chan struct{}, n)
	for i := range landed {
		landed[i] = make(chan struct{})
	}
	for _, k := range keys {
		tail := o.tails[k]
		if tail == nil {
			tail = make([]chan struct{}, n)
			o.tails[k] = tail
		}
		for i := range tail {
			if tail[i] != nil && !contains(preds[i], tail[i]) {
				preds[i] = append(preds[i], tail[i])
			}
			tail[i] = landed[i]
		}
	}
	return preds, landed
}

// leave closes a call's channel on node i and forgets keys whose last
// calls all landed.
func (o *keyOrder) leave(keys []string, i int, landed chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(landed)
	for _, k := range keys {
		tail := o.tails[k]
		if tail == nil || tail[i] != landed {
			continue
		}
		tail[i] = nil
		empty := true
		for _, c := range tail {
			empty = empty && c == nil
		}
		if empty {
			delete(o.tails, k)
		}
	}
}

// pending is the number of keys with a call not yet landed on some node.
func (o *keyOrder) pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.tails)
}

func contains(chs []chan struct{}, ch chan struct{}) bool {
	for _, c := range chs {
		if c == ch {
			return true
		}
	}
	return false
}

// KillTimeout bounds a SCRIPT KILL sent to a node whose script outlived
// the time limit. A node reads it only once the script ran past its own
// busy-reply-threshold (Redis's default: 5 s), so it is generous.
const KillTimeout = 15 * time.Second

// Eval runs s with keys and args on every node, each within limit, and
// returns the reply a majority gave (see above), or a *luascript.EvalError. Nodes
// still running the script at limit are sent SCRIPT KILL, in the
// background, so that they answer again (a script that already wrote
// cannot be killed: Redis then answers UNKILLABLE and the node stays busy
// until the script ends).
//
// A script that writes runs under its turn, and the nodes' states of its
// keys are compared and repaired after it (repair.go). A script that only
// reads (s.Writes false: the admission check found no writing command)
// takes no turn; when the nodes that answered it disagree without a
// majority, it runs once more, within what is left of limit, under the
// turn with its keys' states: that second run waits for the scripts in
// flight on the keys, and repairs a minority that drifted, so the client
// gets the majority's reply wherever a majority of nodes holds one state.
// Its errors say that it changed nothing (EvalError.Read).
func (r *Redlock) Eval(ctx context.Context, s *luascript.Admitted, keys, args []string, limit time.Duration) (luascript.Reply, error) {
	deadline := time.Now().Add(limit)
	v, err := r.eval(ctx, s, keys, args, limit, s.Writes)
	var ee *luascript.EvalError
	if !s.Writes && len(keys) > 0 && errors.As(err, &ee) && ee.Turn == "" && ee.Answered >= r.quorum {
		if left := time.Until(deadline); left > 0 {
			var again *luascript.EvalError
			v2, err2 := r.eval(ctx, s, keys, args, left, true)
			if !errors.As(err2, &again) || again.Turn == "" { // no turn: the first run's disagreement says more
				v, err = v2, err2
			}
		}
	}
	if !s.Writes && errors.As(err, &ee) {
		ee.Read = true
	}
	return v, err
}

// eval runs s once; under its turn (and with its keys' states compared
// and repaired) when turn is set and s has keys.
func (r *Redlock) eval(ctx context.Context, s *luascript.Admitted, keys, args []string, limit time.Duration, turn bool) (luascript.Reply, error) {
	op := &Op{Kind: OpEval, Script: s, Keys: keys, Args: args}
	if turn && len(keys) > 0 {
		t, err := r.enterTurn(ctx, keys, limit)
		if err != nil {
			return luascript.Reply{}, err
		}
		op.Turn, op.turn, op.State = t.token, t, true
		t.vote = newStateVote(r, uniqueKeys(keys))
	}
	sel := newSelection(r.quorum, len(r.nodes), s.ReadsTime)
	f, err := r.fanout(ctx, limit, op, nil, sel.add)
	r.bg.Go(func() { r.killSlow(f, sel.timedOut) })
	if err != nil {
		return luascript.Reply{}, err
	}
	if v, ok := sel.answer(); ok {
		return v, nil
	}
	return luascript.Reply{}, &luascript.EvalError{Nodes: len(r.nodes), Needed: r.quorum, Answered: sel.answered,
		Agreeing: sel.best(), TimedOut: len(sel.timedOut), Limit: limit, Err: errors.Join(sel.errs...)}
}

// killSlow waits for the rest of the flight's calls and sends SCRIPT KILL
// to every node whose call timed out (timedOut: those read already).
func (r *Redlock) killSlow(f *flight, timedOut []int) {
	for f.got < f.n {
		rep := <-f.replies
		f.note(rep)
		if isTimeout(rep.Err) {
			timedOut = append(timedOut, rep.Tag)
		}
	}
	f.cancel()
	if len(timedOut) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.life, KillTimeout)
	defer cancel()
	done := make(Replies, len(timedOut))
	for _, i := range timedOut {
		r.nodes[i].Do(ctx, &Op{Kind: OpKill}, i, done)
	}
	for range timedOut {
		<-done
	}
}

// isTimeout reports whether a node's call ended at its deadline.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}

// selection counts the replies of one script run.
type selection struct {
	q, n     int
	time     bool              // the script reads remaining times
	exact    map[string]*votes // replies by their encoding
	shape    map[string]*votes // replies by their encoding with positive integers blanked (time only)
	answered int
	failed   int
	timedOut []int
	errs     []error
}

type votes struct {
	count int
	reply luascript.Reply // for shape: the smallest integers seen at each blank
}

func newSelection(q, n int, time bool) *selection {
	return &selection{q: q, n: n, time: time, exact: map[string]*votes{}, shape: map[string]*votes{}}
}

// add counts one node's reply; it reports true once the answer is known:
// a majority agreed, or no reply can still gather one.
func (s *selection) add(rep Reply) bool {
	if rep.Err != nil {
		s.failed++
		s.errs = append(s.errs, rep.Err)
		if isTimeout(rep.Err) {
			s.timedOut = append(s.timedOut, rep.Tag)
		}
	} else {
		s.answered++
		s.vote(s.exact, encode(rep.Value, false), rep.Value)
		if s.time {
			s.vote(s.shape, encode(rep.Value, true), rep.Value)
		}
	}
	pending := s.n - s.answered - s.failed
	return s.best() >= s.q || s.best()+pending < s.q
}

func (s *selection) vote(m map[string]*votes, key string, v luascript.Reply) {
	g := m[key]
	if g == nil {
		m[key] = &votes{count: 1, reply: v}
		return
	}
	g.count++
	g.reply = smaller(g.reply, v)
}

// best is the largest number of nodes that agree.
func (s *selection) best() int {
	n := 0
	for _, m := range []map[string]*votes{s.exact, s.shape} {
		for _, g := range m {
			n = max(n, g.count)
		}
	}
	return n
}

// answer is the reply a majority gave: equal replies first, else (for a
// script that reads times) replies that differ only in positive integers,
// with the smallest of each.
func (s *selection) answer() (luascript.Reply, bool) {
	for _, m := range []map[string]*votes{s.exact, s.shape} {
		for _, g := range m {
			if g.count >= s.q {
				return g.reply, true
			}
		}
	}
	return luascript.Reply{}, false
}

// encode writes v unambiguously; with blank, a positive integer is written
// as "T" whatever its value.
func encode(v luascript.Reply, blank bool) string {
	var b strings.Builder
	encodeTo(&b, v, blank)
	return b.String()
}

func encodeTo(b *strings.Builder, v luascript.Reply, blank bool) {
	switch v.Kind {
	case luascript.Int:
		if blank && v.Int > 0 {
			b.WriteString("T;")
			return
		}
		b.WriteString("i" + strconv.FormatInt(v.Int, 10) + ";")
	case luascript.Array:
		b.WriteString("*" + strconv.Itoa(len(v.Array)) + ";")
		for _, e := range v.Array {
			encodeTo(b, e, blank)
		}
	default:
		b.WriteString(strconv.Itoa(int(v.Kind)) + strconv.Itoa(len(v.Str)) + ":" + v.Str)
	}
}

// smaller is a and b, which encode alike with blanks, with the smaller
// integer at each place.
func smaller(a, b luascript.Reply) luascript.Reply {
	switch a.Kind {
	case luascript.Int:
		a.Int = min(a.Int, b.Int)
	case luascript.Array:
		out := make([]luascript.Reply, len(a.Array))
		for i := range a.Array {
			out[i] = smaller(a.Array[i], b.Array[i])
		}
		a.Array = out
	}
	return a
}
