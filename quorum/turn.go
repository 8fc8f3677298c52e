package quorum

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/luascript"
)

// Turns: the order of scripts on a key, across instances.
//
// A script outside the catalog that writes runs on a node only while the
// node's turn on each of its keys holds the script's token (the node's
// guard checks it atomically with the script). Before the script is
// sent, the instance takes the turn on every node (OpTurn: all of the
// script's keys or none, NX, for the time limit plus TurnMargin); with a
// majority, the script is sent to the nodes that gave the turn, and
// afterwards every node gets the turn back (OpTurnBack, delete if
// equal). Without a majority, the instance gives back what it got, backs
// off (random, from TurnBackoffMin doubling up to TurnBackoffMax) and
// tries again with a new token, until the script's time limit, and then
// the client gets a NOQUORUM error that says the turn could not be taken.
//
// Why the nodes then run the scripts on a key in one order. Let D be the
// moment the instance knew it held a majority M of turns, and V the
// moment the first of those turns can expire (the OpTurn was sent at S,
// V = S + TTL - drift). Until the instance gives anything back, and
// before V, it holds every turn of M: call that span its hold. Two holds
// never overlap, since two majorities share a node and a node's turn has
// one token at a time. The script is sent to node x only once x said it
// gave the turn, at a moment y within the hold (the first majority's
// nodes at D; a node that answered later, or that refused and gave the
// turn on a retry, at its answer, if that is before V and before the
// give-back), so x's turn holds the token at y; it runs on x only while
// x's turn still holds it. On x, the spans in which different tokens hold
// the turn do not overlap, and each script's span on x contains a moment
// of its own hold; holds are ordered in time, so every node runs the
// scripts in the order of their holds. A script whose turn expired
// before it reached a node (a paused instance) is refused there by the
// guard, which counts as that node's failure (ErrTurnLost), never as a
// reply.
//
// A node that refused the turn at first (another instance's attempt held
// it for a moment) is asked again, alone, until V: the other attempt
// gives its turns back once it sees no majority. Only nodes that failed
// (down, paused, timed out, suspected) miss the script: the minority
// drift that a node fault always causes.
//
// Within one instance, scripts on a key wait for each other's turns
// locally (turnQueue), so that they do not contend on the nodes; the
// per-node order of dispatch (keyOrder) still applies to every script.
//
// Scripts that write nothing (Admitted.Writes false: the plain reads)
// take no turn: they change no node, so the order in which nodes run
// them cannot make the nodes' states differ.

// Turn tuning.
const (
	// TurnMargin is added to the script time limit for the turn's TTL.
	TurnMargin = time.Second
	// TurnBackoffMin and TurnBackoffMax bound the wait before trying
	// again to take a turn; the wait doubles from the first to the
	// second, and is drawn at random from [d/2, 3d/2).
	TurnBackoffMin = time.Millisecond
	TurnBackoffMax = 50 * time.Millisecond
)

// ErrTurnLost is a node's failure for a script guarded by its turn that
// did not run there: the turn on its keys was not the script's on that
// node (it expired, or another instance took it), or the node never gave
// the turn.
var ErrTurnLost = errors.New("not run: the turn on the script's keys was not this script's on the node")

// TurnKeys are the keys a turn is taken on: keys sorted, without repeats.
func TurnKeys(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

// turnQueue lets the scripts of one instance that share a key take the
// turn one after the other.
type turnQueue struct {
	mu    sync.Mutex
	slots map[string]*turnSlot
}

type turnSlot struct {
	ch    chan struct{} // holds a value while a script has the key
	users int
}

// enter waits until no other script of the instance has any of keys
// (sorted, no repeats), or ctx ends. leave lets the next one in.
func (q *turnQueue) enter(ctx context.Context, keys []string) (leave func(), err error) {
	q.mu.Lock()
	if q.slots == nil {
		q.slots = map[string]*turnSlot{}
	}
	slots := make([]*turnSlot, len(keys))
	for i, k := range keys {
		s := q.slots[k]
		if s == nil {
			s = &turnSlot{ch: make(chan struct{}, 1)}
			q.slots[k] = s
		}
		s.users++
		slots[i] = s
	}
	q.mu.Unlock()
	held := 0
	leave = func() {
		for i := held - 1; i >= 0; i-- {
			<-slots[i].ch
		}
		q.mu.Lock()
		for i, k := range keys {
			if slots[i].users--; slots[i].users == 0 {
				delete(q.slots, k)
			}
		}
		q.mu.Unlock()
	}
	for _, s := range slots { // in key order: no two scripts wait on each other
		select {
		case s.ch <- struct{}{}:
			held++
		case <-ctx.Done():
			leave()
			return nil, ctx.Err()
		}
	}
	return leave, nil
}

// turn is a turn held on a majority: the run of one script under it.
type turn struct {
	r      *Redlock
	keys   []string
	token  string
	valid  time.Time     // V: before it, the majority's turns hold
	epoch  uint64        // the trust epoch read before the turn was asked (counts)
	gates  []chan bool   // node i: send the script there (true) or not; decided once
	gated  chan struct{} // closed once every gate is decided
	cancel context.CancelFunc
	// backs counts the nodes whose part is over (the script landed or was
	// not sent, and the turn was given back there); once a majority's
	// parts are over, leave lets the instance's next script on the keys
	// take its turn (a node still running this one refuses it the turn
	// until then, and is asked again).
	backs atomic.Int32
	leave func()
	once  sync.Once
	// vote compares the nodes' states of the keys after the script, and
	// repairs the minority before it gets the turn back (repair.go); nil
	// when the script is not asked for them.
	vote *stateVote
}

// partDone counts node's part as over.
func (t *turn) partDone() {
	if int(t.backs.Add(1)) == t.r.quorum {
		t.once.Do(t.leave)
	}
}

// newToken is a turn's token: random, so that no other attempt of any
// instance has it.
func newToken() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return hex.EncodeToString(b[:])
}

// takeTurn takes the turn on keys on a majority, trying again with
// backoff until deadline. It fails with a *luascript.EvalError (Turn set)
// when the deadline passed first.
func (r *Redlock) takeTurn(ctx context.Context, keys []string, ttl time.Duration, deadline time.Time, limit time.Duration) (*turn, error) {
	backoff := TurnBackoffMin
	for {
		t, err := r.tryTurn(ctx, keys, ttl, deadline)
		if t != nil {
			return t, nil
		}
		wait := backoff/2 + rand.N(backoff)
		backoff = min(2*backoff, TurnBackoffMax)
		if ctx.Err() != nil || time.Until(deadline) < wait {
			return nil, &luascript.EvalError{Nodes: len(r.nodes), Needed: r.quorum, Limit: limit,
				Turn: "other scripts on the same keys held it; " + err.Error()}
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
}

// tryTurn makes one attempt: the turn on a majority (a turn whose
// remaining nodes are decided in the background), or nil and why not,
// having sent the nodes the turn back.
func (r *Redlock) tryTurn(ctx context.Context, keys []string, ttl time.Duration, deadline time.Time) (*turn, error) {
	n := len(r.nodes)
	token := newToken()
	sent := time.Now()
	// A node that does not answer within the node timeout is not waited
	// for: a majority can be had without it.
	cctx, cancel := context.WithDeadline(r.life, minTime(deadline, sent.Add(r.timeout(0))))
	op := &Op{Kind: OpTurn, Keys: keys, Token: token, TTL: ttl}
	replies := make(Replies, n)
	epoch := r.sentEpoch()
	for i, nd := range r.nodes {
		nd.Do(cctx, op, i, replies)
	}
	t := &turn{r: r, keys: keys, token: token, valid: sent.Add(ttl - r.drift(ttl)), epoch: epoch, cancel: cancel,
		gates: make([]chan bool, n), gated: make(chan struct{})}
	for i := range t.gates {
		t.gates[i] = make(chan bool, 1)
	}
	yes, failed, refused := 0, 0, 0
	var errs []error
	var answered []Reply
	for got := 0; got < n; {
		if yes >= r.quorum || yes+(n-got) < r.quorum {
			break
		}
		var rep Reply
		select {
		case rep = <-replies:
		case <-ctx.Done():
			rep = Reply{Tag: -1, Err: ctx.Err()}
		}
		if rep.Tag < 0 {
			break
		}
		got++
		r.health.note(rep.Tag, rep.Err)
		r.NoteClock(rep.Tag, rep.Err)
		if rep.Err == nil && !r.counts(rep, epoch) {
			rep.Err = ErrNotCounted
		}
		answered = append(answered, rep)
		switch {
		case rep.Err != nil:
			failed++
			errs = append(errs, &NodeError{Node: r.nodes[rep.Tag].String(), Err: rep.Err})
		case rep.OK:
			yes++
		default:
			refused++
		}
	}
	if yes < r.quorum || !time.Now().Before(t.valid) || ctx.Err() != nil {
		r.bg.Go(func() { t.back(replies, n-len(answered)) })
		if yes >= r.quorum {
			return nil, errors.New("the turn was taken too late to use")
		}
		return nil, &turnRefusedError{yes: yes, refused: refused, failed: failed, errs: errs}
	}
	// Held: the nodes that gave the turn get the script; the others are
	// decided in the background.
	decided := make([]bool, n)
	var pending []int // refused: asked again
	for _, rep := range answered {
		decided[rep.Tag] = true
		switch {
		case rep.Err != nil:
			t.gates[rep.Tag] <- false
		case rep.OK:
			t.gates[rep.Tag] <- true
		default:
			pending = append(pending, rep.Tag)
		}
	}
	// A suspected node that has not answered yet is not waited for: it
	// does not get the script (it failed its recent calls), and its turn,
	// if it comes, is given back.
	suspects := r.health.suspected()
	for i := range n {
		if !decided[i] && suspects&(1<<i) != 0 {
			decided[i] = true
			t.gates[i] <- false
		}
	}
	r.bg.Go(func() { t.decideRest(replies, n-len(answered), pending, decided) })
	return t, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// turnRefusedError says why an attempt got no majority of turns.
type turnRefusedError struct {
	yes, refused, failed int
	errs                 []error
}

func (e *turnRefusedError) Error() string {
	s := fmt.Sprintf("last attempt: %d gave the turn, %d were in another script's turn, %d failed", e.yes, e.refused, e.failed)
	if len(e.errs) > 0 {
		s += " (" + errors.Join(e.errs...).Error() + ")"
	}
	return s
}

// back gives the turn of a failed attempt back on every node, and again
// on each node whose answer, still to come, says it gave the turn.
func (t *turn) back(replies chan Reply, left int) {
	t.giveBack(nil)
	for range left {
		rep := <-replies
		t.r.health.note(rep.Tag, rep.Err)
		if rep.Err == nil && rep.OK { // landed after the give-back was sent
			t.giveBack(&rep.Tag)
		}
	}
	t.cancel()
}

// giveBack sends OpTurnBack to every node (only to node i if i is not
// nil) and waits for the answers, bounded by the node timeout.
func (t *turn) giveBack(only *int) {
	ctx, cancel := context.WithTimeout(t.r.life, t.r.timeout(0))
	defer cancel()
	op := &Op{Kind: OpTurnBack, Keys: t.keys, Token: t.token}
	done := make(Replies, len(t.r.nodes))
	sent := 0
	for i, nd := range t.r.nodes {
		if only == nil || *only == i {
			nd.Do(ctx, op, i, done)
			sent++
		}
	}
	for range sent {
		<-done
	}
}

// decideRest decides the gates of the nodes that had not given the turn
// when the majority did: those still to answer (left answers on replies,
// of which those of decided nodes, the suspects, are not waited for) and
// those in pending, which refused. A node that gives the turn before
// t.valid gets the script; one that refused is asked again, alone, until
// then; one that failed does not get it.
func (t *turn) decideRest(replies chan Reply, left int, pending []int, decided []bool) {
	r := t.r
	var wg sync.WaitGroup
	ask := func(i int) { wg.Go(func() { t.gates[i] <- t.retry(i) }) }
	for _, i := range pending {
		ask(i)
	}
	waiting := 0
	for _, d := range decided {
		if !d {
			waiting++
		}
	}
	read := 0
	for ; waiting > 0 && read < left; read++ {
		rep := <-replies
		r.health.note(rep.Tag, rep.Err)
		if decided[rep.Tag] {
			continue // a suspect's late answer: the node's part gives its turn back
		}
		decided[rep.Tag] = true
		waiting--
		switch {
		case rep.Err == nil && rep.OK && r.counts(rep, t.epoch) && time.Now().Before(t.valid):
			t.gates[rep.Tag] <- true
		case rep.Err == nil && !rep.OK:
			ask(rep.Tag)
		default:
			t.gates[rep.Tag] <- false
		}
	}
	wg.Wait()
	close(t.gated)
	for ; read < left; read++ {
		rep := <-replies
		r.health.note(rep.Tag, rep.Err)
	}
	t.cancel()
}

// retry asks node i again, alone, for the turn, after refusals, while
// the turn holds; it reports whether the node gave it. A
// node that fails is not asked again.
func (t *turn) retry(i int) bool {
	r := t.r
	backoff := TurnBackoffMin
	for {
		wait := backoff/2 + rand.N(backoff)
		backoff = min(2*backoff, TurnBackoffMax)
		if time.Until(t.valid) <= wait {
			return false
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-r.life.Done(): // closed: no more asking
			timer.Stop()
			return false
		}
		// An answer after t.valid is of no use: the call ends there.
		ctx, cancel := context.WithDeadline(r.life, minTime(t.valid, time.Now().Add(r.timeout(0))))
		done := make(Replies, 1)
		ttl := time.Until(t.valid) + r.drift(time.Until(t.valid)) + TurnMargin
		epoch := r.sentEpoch()
		r.nodes[i].Do(ctx, &Op{Kind: OpTurn, Keys: t.keys, Token: t.token, TTL: ttl}, i, done)
		rep := <-done
		cancel()
		r.health.note(i, rep.Err)
		switch {
		case rep.Err != nil || !r.counts(rep, epoch):
			return false
		case rep.OK:
			return time.Now().Before(t.valid)
		}
	}
}

// enterTurn waits for the instance's earlier scripts on keys, then takes
// the turn on them; the turn is given back, and the next script let in,
// once the script ran (dispatchTurn).
func (r *Redlock) enterTurn(ctx context.Context, keys []string, limit time.Duration) (*turn, error) {
	deadline := time.Now().Add(limit)
	tk := TurnKeys(keys)
	qctx, cancel := context.WithDeadline(ctx, deadline)
	leave, err := r.turns.enter(qctx, tk)
	cancel()
	if err != nil {
		return nil, &luascript.EvalError{Nodes: len(r.nodes), Needed: r.quorum, Limit: limit,
			Turn: "this instance's earlier scripts on the same keys held the turn until the time limit"}
	}
	t, err := r.takeTurn(ctx, tk, limit+TurnMargin, deadline, limit)
	if err != nil {
		leave()
		return nil, err
	}
	t.leave = leave
	return t, nil
}

// dispatchTurn sends op, guarded by its turn, to every node that gave the
// turn, once the calls before it on its keys landed there (keyOrder); a
// node that did not give it answers ErrTurnLost. Each node gets the turn
// back once its call landed and every node's part is decided (a node
// still being asked keeps the majority's turns held).
func (r *Redlock) dispatchTurn(ctx context.Context, op *Op, replies Sink) {
	t := op.turn
	keys := uniqueKeys(op.Keys)
	preds, landed := r.order.enter(keys, len(r.nodes))
	for i, n := range r.nodes {
		own := make(Replies, 1)
		go func() {
			defer t.partDone()
			var send bool
			select {
			case send = <-t.gates[i]:
			case <-ctx.Done():
			}
			var rep Reply
			epoch := r.sentEpoch() // before the call is sent
			switch {
			case !waitAll(ctx, preds[i]):
				rep = Reply{Tag: i, Err: ErrOrderWait}
			case !send && ctx.Err() != nil:
				rep = Reply{Tag: i, Err: ctx.Err()}
			case !send:
				rep = Reply{Tag: i, Err: ErrTurnLost}
			default:
				n.Do(ctx, op, i, own)
				rep = <-own
			}
			replies.Put(rep)
			if t.vote != nil {
				var states []KeyState
				if rep.Err == nil && r.counts(rep, epoch) {
					states = rep.States
				}
				t.vote.add(i, states)
				if states != nil {
					r.repairNode(t, i, states)
				}
			}
			for _, p := range preds[i] {
				<-p
			}
			r.order.leave(keys, i, landed[i])
			<-t.gated
			t.giveBack(&i)
		}()
	}
}
