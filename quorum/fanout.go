package quorum

import (
	"context"
	"errors"
	"time"
)

// flight is one fan-out: an Op sent to every node, whose replies arrive on
// one channel buffered to N, so that nodes never block on a caller that
// stopped listening.
type flight struct {
	replies chan Reply
	n, got  int
	cancel  context.CancelFunc
}

// fanout sends op to every node and feeds their replies to decide in
// arrival order until decide returns true, every node has answered, or ctx
// is done (then it returns ctx's error).
//
// All calls share one context, detached from ctx's cancellation and
// bounded by timeout: calls still running when fanout returns finish in the
// background, so a write the caller no longer waits for (the last nodes of
// a release, a commit beyond the quorum) still reaches every node that
// answers in time.
func fanout(ctx context.Context, nodes []Node, timeout time.Duration, op *Op, decide func(Reply) bool) (*flight, error) {
	return fanoutThen(ctx, nodes, timeout, op, nil, decide)
}

// fanoutThen is fanout that runs sent, if not nil, once op is on its way to
// every node.
func fanoutThen(ctx context.Context, nodes []Node, timeout time.Duration, op *Op, sent func(), decide func(Reply) bool) (*flight, error) {
	f := &flight{replies: make(chan Reply, len(nodes)), n: len(nodes)}
	var cctx context.Context
	cctx, f.cancel = context.WithTimeout(context.WithoutCancel(ctx), timeout)
	for i, n := range nodes {
		n.Do(cctx, op, i, f.replies)
	}
	if sent != nil {
		sent()
	}
	for f.got < f.n {
		select {
		case r := <-f.replies:
			f.got++
			if r.Err != nil {
				r.Err = &NodeError{Node: nodes[r.Tag].String(), Err: r.Err}
			}
			if decide(r) {
				f.release()
				return f, nil
			}
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
	f.release()
	return f, nil
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
	for ; f.got < f.n; f.got++ {
		<-f.replies
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
// outcome: a quorum said yes, or a quorum can no longer say yes and it is
// already known whether a majority answered at all.
func (t *tally) decided() bool {
	if t.yes >= t.q {
		return true
	}
	if t.yes+t.pending() >= t.q {
		return false
	}
	return t.answered() >= t.q || t.answered()+t.pending() < t.q
}

// outcome turns the count into the operation's result: nil for a quorum of
// yes, no when a majority answered but not yes, a NoQuorumError otherwise.
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

func (t *tally) noQuorum(op string) error {
	return &NoQuorumError{Op: op, Answered: t.answered(), Needed: t.q, Nodes: t.n, Err: errors.Join(t.errs...)}
}
