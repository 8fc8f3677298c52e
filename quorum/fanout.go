package quorum

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// result is one node's answer in a fan-out.
type result[T any] struct {
	val T
	err error
}

// flight is the set of calls of one fan-out.
type flight struct {
	wg      sync.WaitGroup
	pending atomic.Int32
}

// Wait blocks until every call of the fan-out has finished.
func (f *flight) Wait() { f.wg.Wait() }

// landed reports whether every call has finished.
func (f *flight) landed() bool { return f.pending.Load() == 0 }

// fanout runs call on every node in parallel and feeds the answers to
// decide in arrival order until decide returns true, every node has
// answered, or ctx is done (then it returns ctx's error). The flight tells
// when every call has finished.
//
// Each call runs on its own context, detached from ctx's cancellation and
// bounded by timeout, so calls still running when fanout returns finish in
// the background (their channel is buffered to N): a write the caller no
// longer waits for (the last nodes of a release, a commit beyond the
// quorum) still reaches every node that answers in time.
func fanout[T any](ctx context.Context, nodes []Node, timeout time.Duration,
	call func(ctx context.Context, n Node) (T, error), decide func(r result[T]) bool) (*flight, error) {
	ch := make(chan result[T], len(nodes))
	base := context.WithoutCancel(ctx)
	f := &flight{}
	f.wg.Add(len(nodes))
	f.pending.Store(int32(len(nodes)))
	for _, n := range nodes {
		go func() {
			defer f.wg.Done()
			defer f.pending.Add(-1)
			cctx, cancel := context.WithTimeout(base, timeout)
			defer cancel()
			v, err := call(cctx, n)
			if err != nil {
				err = &NodeError{Node: n.String(), Err: err}
			}
			ch <- result[T]{val: v, err: err}
		}()
	}
	for range nodes {
		select {
		case r := <-ch:
			if decide(r) {
				return f, nil
			}
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
	return f, nil
}

// tally counts the answers of one fan-out over n nodes with quorum q.
type tally struct {
	q, n    int
	yes, no int // nodes that answered yes / answered no
	errs    []error
}

func newTally(q, n int) *tally { return &tally{q: q, n: n} }

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
