package quorum

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// flight is one fan-out: an Op sent to every node, whose replies arrive on
// one channel buffered to N, so that nodes never block on a caller that
// stopped listening, until the flight is handed over (detach): from then
// on, whoever delivers a reply handles it.
type flight struct {
	replies chan Reply
	wake    chan struct{} // a token once arrived reaches wakeAt
	arrived atomic.Int32  // replies put on the channel
	wakeAt  atomic.Int32
	n, got  int
	failed  uint64 // bit i: node i's call failed (among the replies read)
	cancel  context.CancelFunc
	health  *health
	epoch   uint64 // the trust epoch read before the calls were sent (counts)

	detached atomic.Bool
	mu       sync.Mutex  // held while handling replies once detached
	late     func(Reply) // set by detach: each reply still to come
	then     func()      // set by detach: run once every call landed
}

// Put takes a node's reply onto the channel, and once the flight is
// detached, handles what the channel holds. A reply put before detach set
// the flag is there for detach's own drain; one put after is drained here.
func (f *flight) Put(rep Reply) {
	f.replies <- rep // room for every reply: never blocks
	if f.arrived.Add(1) == f.wakeAt.Load() {
		select {
		case f.wake <- struct{}{}:
		default: // a token waits already
		}
	}
	if f.detached.Load() {
		f.drain()
	}
}

// drain hands each reply on the channel to late, noted first, and runs
// then once every call landed.
func (f *flight) drain() {
	f.mu.Lock()
	for len(f.replies) > 0 { // only drains receive, under f.mu
		rep := <-f.replies
		f.note(rep)
		f.late(rep)
	}
	var then func()
	if f.got == f.n {
		then, f.then = f.then, nil // once, by whoever drained the last reply
	}
	f.mu.Unlock()
	if then != nil {
		f.cancel()
		then()
	}
}

// detach hands the flight's replies to late, each noted first: those on
// the channel now, here, then each one to come on the goroutine that
// delivers it (a node's reader), so that no goroutine waits for them. late
// therefore must be quick and never wait on a node. then runs once every
// call has landed, here or after the last late. Nobody may read the
// channel after, and detach is called once, by the flight's reader.
func (f *flight) detach(late func(Reply), then func()) {
	f.late, f.then = late, then // before the flag, which Put reads
	f.detached.Store(true)
	f.drain()
}

// fanout sends op to every node and feeds their replies to decide in
// arrival order until decide returns true, every node has answered, or ctx
// is done (then it returns ctx's error). A suspected node is not waited
// for: once every other node has answered, a majority of them without
// error, decide gets ErrSuspected for it (its real answer, if it came
// first, counts instead). Without such a majority, only the suspects can
// still make one, and they are waited for. An answer the restart rule does
// not count (restart.go) reaches decide as ErrNotCounted.
//
// All calls share one context (an opContext: no timer unless a node waits
// on it), detached from ctx's cancellation, bounded by timeout and ended
// by Close: calls still running when fanout returns finish in the
// background, so a write the caller no longer waits for (the last nodes of
// a release, a commit beyond the quorum) still reaches every node that
// answers in time.
func (r *Redlock) fanout(ctx context.Context, timeout time.Duration, op *Op, sent func(), decide func(Reply) bool) (*flight, error) {
	f := &flight{replies: make(chan Reply, len(r.nodes)), wake: make(chan struct{}, 1), n: len(r.nodes), health: r.health}
	cctx := newOpContext(r.life, timeout)
	f.cancel = cctx.cancel
	f.epoch = r.sentEpoch()
	r.dispatch(cctx, op, f)
	if sent != nil {
		sent()
	}
	suspects := r.health.suspected()
	awaited, answers := f.n-popcount(suspects), 0
	// No decide (a tally's, a selection's, an inspection's) and no
	// presumption is reached on fewer replies than this: the caller sleeps
	// until they came.
	need := min(r.quorum, f.n-r.quorum+1)
	for f.got < f.n {
		if awaited == 0 && suspects != 0 && answers >= r.quorum {
			r.presume(suspects, decide)
			break
		}
		var rep Reply
		select {
		case rep = <-f.replies:
		default:
			if !f.await(ctx, max(f.got+1, need)) {
				return f, ctx.Err()
			}
			continue
		}
		f.note(rep)
		r.NoteClock(rep.Tag, rep.Err)
		if rep.Err == nil && op.Kind != OpLeave && !r.counts(rep, f.epoch) {
			rep.Err = r.notCounted(rep.Tag, rep.Incarnation) // a restarted node on probation: as if silent
		}
		if suspects&(1<<rep.Tag) == 0 {
			awaited--
		}
		suspects &^= 1 << rep.Tag
		if rep.Err == nil {
			answers++
		} else {
			rep.Err = &NodeError{Node: r.nodes[rep.Tag].String(), Err: rep.Err}
		}
		if decide(rep) {
			f.release()
			return f, nil
		}
	}
	f.release()
	return f, nil
}

// await waits until k replies were put, or ctx is done (false). One wake
// of the caller for the replies that decide, not one for each.
func (f *flight) await(ctx context.Context, k int) bool {
	f.wakeAt.Store(int32(k))
	for int(f.arrived.Load()) < k { // else Put saw wakeAt before it was k
		select {
		case <-f.wake: // perhaps a token for an earlier k
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// presume feeds decide an ErrSuspected for each node in suspects, until
// it decides.
func (r *Redlock) presume(suspects uint64, decide func(Reply) bool) {
	for i, n := range r.nodes {
		if suspects&(1<<i) != 0 && decide(Reply{Tag: i, Err: &NodeError{Node: n.String(), Err: ErrSuspected}}) {
			return
		}
	}
}

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// note counts a reply read from the flight and tells the nodes' health.
func (f *flight) note(rep Reply) {
	f.got++
	f.health.note(rep.Tag, rep.Err)
	if rep.Err != nil {
		f.failed |= 1 << rep.Tag
	}
}

// release frees the shared context once every call has landed; calls still
// in flight keep it until its deadline.
func (f *flight) release() {
	if f.got == f.n {
		f.cancel()
	}
}

// Wait blocks until every call of the fan-out has landed. Only one
// goroutine at a time may wait, after fanout returned.
func (f *flight) Wait() {
	for f.got < f.n {
		f.note(<-f.replies)
	}
	f.cancel()
}

// landed reports whether every call has landed.
func (f *flight) landed() bool { return f.got == f.n }

// tally counts the answers of one fan-out over n nodes with quorum q.
type tally struct {
	q, n    int
	yes, no int // nodes that answered yes / answered no
	errs    []error
}

func newTally(q, n int) tally { return tally{q: q, n: n} }

func (t *tally) add(ok bool, err error) {
	switch {
	case err != nil:
		t.errs = append(t.errs, err)
	case ok:
		t.yes++
	default:
		t.no++
	}
}

func (t *tally) answered() int { return t.yes + t.no }
func (t *tally) pending() int  { return t.n - t.answered() - len(t.errs) }

// decided reports whether waiting for more answers could change the
// outcome of an acquire: a quorum said yes, or a quorum can no longer say
// yes and it is already known whether a majority answered at all.
func (t *tally) decided() bool {
	if t.yes >= t.q {
		return true
	}
	if t.yes+t.pending() >= t.q {
		return false
	}
	return t.answered() >= t.q || t.answered()+t.pending() < t.q
}

// outcome turns the count into an acquire's result: nil for a quorum of
// yes, no when a majority answered but not yes, an engine.NoQuorumError otherwise.
func (t *tally) outcome(op string, no error) error {
	switch {
	case t.yes >= t.q:
		return nil
	case t.answered() >= t.q:
		return no
	default:
		return t.noQuorum(op)
	}
}

// settled reports whether waiting could change the verdict of an
// operation on a lock that may be held (extend, release): a quorum said
// yes, more than n-q said no (a majority cannot hold it), or nobody is left.
func (t *tally) settled() bool {
	return t.yes >= t.q || t.no > t.n-t.q || t.pending() == 0
}

// verdict turns the count into the result of an operation on a lock that
// may be held: nil for a quorum of yes; no only when so many nodes said no
// that no majority can hold it; otherwise the truth is unknown — a
// engine.NoQuorumError when fewer than a majority answered, an
// engine.UnknownOutcomeError when they answered but did not decide.
func (t *tally) verdict(op string, no error) error {
	switch {
	case t.yes >= t.q:
		return nil
	case t.no > t.n-t.q:
		return no
	case t.answered() < t.q:
		return t.noQuorum(op)
	default:
		return t.unknown(op)
	}
}

func (t *tally) noQuorum(op string) error {
	failed := make([]string, len(t.errs))
	for i, err := range t.errs {
		failed[i] = err.Error() // a *NodeError: "addr: reason"
	}
	return &engine.NoQuorumError{Op: op, Answered: t.answered(), Needed: t.q, Nodes: t.n, Err: errors.Join(t.errs...), Failed: failed}
}

func (t *tally) unknown(op string) error {
	return &engine.UnknownOutcomeError{Op: op, Yes: t.yes, No: t.no, Silent: t.n - t.answered(), Err: errors.Join(t.errs...)}
}
