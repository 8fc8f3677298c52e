package quorum

import (
	"context"
	"time"
)

// carry sends op, in the background, to each node of the set (bit i for
// node i) until the node answers, sending it again once per node timeout,
// for at most carryFor or until Close. It is how a rollback or a release
// reaches a node that was silent when it was first sent.
func (r *Redlock) carry(op *Op, set uint64) {
	for i := range r.nodes {
		if set&(1<<i) != 0 {
			r.bg.Go(func() { r.resend(i, op) })
		}
	}
}

// resend runs op on node i until it answers.
func (r *Redlock) resend(i int, op *Op) {
	timeout := r.timeout(op.UndoFor)
	deadline := time.Now().Add(carryFor)
	for {
		start := time.Now()
		if r.call(i, op, timeout) == nil || time.Now().After(deadline) {
			return
		}
		pause := max(timeout-time.Since(start), 10*time.Millisecond) // a refused connection fails at once
		select {
		case <-time.After(pause):
		case <-r.life.Done():
			return
		}
	}
}

// call runs op on node i once, within timeout, and tells the node's health.
func (r *Redlock) call(i int, op *Op, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(r.life, timeout)
	defer cancel()
	done := make(Replies, 1)
	r.nodes[i].Do(ctx, op, i, done)
	rep := <-done // a node always replies, at the latest once ctx is done
	if r.life.Err() == nil {
		r.health.note(i, rep.Err)
	}
	return rep.Err
}

// finish carries op, in the background, to the nodes of the flight that
// failed it, including those still in flight now that fail later.
func (r *Redlock) finish(f *flight, op *Op) {
	if f.landed() && f.failed == 0 {
		return
	}
	r.afterward(f, func(Reply) {}, func() { r.carry(op, f.failed) })
}
