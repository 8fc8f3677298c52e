package upstream

import (
	"context"
	"errors"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// call is one operation on its way to the node. It carries its caller's
// context only so that an abandoned call is not sent and a batch is
// bounded by its callers' deadlines.
type call struct {
	ctx  context.Context
	op   *quorum.Op
	tag  int
	done quorum.Sink
	// observe, when set, is told how long the call took (RedisOptions.Observe).
	observe func(time.Duration, error)
	start   time.Time
	// The node's reply, once the connection's reader read it: its value,
	// or its error reply (or redis.Nil).
	val   any
	reply error
}

// fail answers the call with err.
func (c *call) fail(err error) { c.deliver(quorum.Reply{Tag: c.tag, Err: err}) }

// deliver hands r to the caller, after telling the observer.
func (c *call) deliver(r quorum.Reply) {
	if c.observe != nil {
		c.observe(time.Since(c.start), r.Err)
	}
	c.done.Put(r)
}

// answer decodes the node's raw reply to the call's operation, answered by
// the node process inc (the run id its connection reached).
func (c *call) answer(v any, err error, inc string) {
	switch c.op.Kind {
	case quorum.OpEval:
		c.deliver(evalReply(c.op, c.tag, v, err, inc))
		return
	case quorum.OpRepair:
		c.deliver(repairReply(c.op, c.tag, err, inc))
		return
	case quorum.OpTurn, quorum.OpTurnBack:
		r := quorum.Reply{Tag: c.tag, Err: err, Incarnation: inc}
		if err == nil && c.op.Kind == quorum.OpTurn {
			r.OK, r.Err = flag(turnScript, v)
		}
		c.deliver(r)
		return
	}
	r := quorum.Reply{Tag: c.tag, Err: err, Incarnation: inc}
	if err == nil {
		r.Err = decode(c.op.Kind, v, &r)
	}
	c.deliver(r)
}

// pastDeadline reports whether now is past the call's deadline: its
// context's, or its batch's (which caps it by the node's Timeout).
func (c *call) pastDeadline(now, batch time.Time) bool {
	if !now.Before(batch) {
		return true
	}
	d, ok := c.ctx.Deadline()
	return ok && !now.Before(d)
}

// callErr is the error of a call that got its result: the caller's context
// error if it ended, else err with the node's address. A batch bounded by
// the caller's deadline can time out a moment before ctx.Err() is set, so
// a passed deadline counts as ended.
func (n *RedisNode) callErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return n.wrap(err)
}

// batch is calls written to the node together, their scripts by SHA1 or
// by source, followed by one TIME unless the batch only gives back
// (clockless); their replies are read together.
type batch struct {
	calls    []*call
	source   bool          // EVAL: a re-send of calls the node had no script for
	timed    bool          // ends with TIME
	deadline time.Time     // by when every reply must have come (batchDeadline)
	sent     time.Duration // monotonic time it was written (clock.go)
	// expired: its deadline passed with its replies unread while a batch
	// behind it still had time; its calls failed then (rearm), and its
	// replies are read and dropped. Set by the connection's reader, under
	// RedisNode.mu.
	expired bool
}

// dispatch, called with n.mu held, releases it after starting what the
// queue needs: first (a re-send by source) and then batches of queued
// calls, written on the node's connection as long as it has room
// (Pipelines batches awaiting replies), or a dial when there is no
// connection. Calls whose callers gave up are answered with their
// context's error instead.
func (n *RedisNode) dispatch(first *batch) {
	cn := n.conn
	if cn == nil && first != nil { // not while its connection's reader answers
		n.queue = append(first.calls, n.queue...)
	}
	if cn == nil {
		if len(n.queue) > 0 && !n.dialing {
			n.dialing = true
			n.workers.Go(n.dial)
		}
		n.idle.Broadcast()
		n.mu.Unlock()
		return
	}
	var gone []*call
	if first != nil {
		n.push(cn, first)
	}
	for len(cn.pending) < n.pipelines && len(n.queue) > 0 {
		b, dead := n.take()
		gone = append(gone, dead...)
		if b != nil {
			n.push(cn, b)
		}
	}
	cn.arm()
	if len(cn.pending) == 0 {
		n.idle.Broadcast()
	}
	write := len(cn.unwritten) > 0 && !cn.writing
	cn.writing = cn.writing || write
	n.mu.Unlock()
	for _, c := range gone {
		c.fail(c.ctx.Err())
	}
	if write {
		n.write(cn, true)
	}
}

// take removes up to MaxBatch calls from the head of the queue (under
// n.mu) and returns those still awaited as a batch (nil if none), and
// those whose callers gave up.
func (n *RedisNode) take() (*batch, []*call) {
	k := min(len(n.queue), n.maxBatch)
	calls := make([]*call, 0, k)
	var dead []*call
	for _, c := range n.queue[:k] {
		if c.ctx.Err() != nil {
			dead = append(dead, c)
		} else {
			calls = append(calls, c)
		}
	}
	m := copy(n.queue, n.queue[k:])
	clear(n.queue[m:])
	n.queue = n.queue[:m]
	if len(calls) == 0 {
		return nil, dead
	}
	return &batch{calls: calls, timed: !clockless(calls), deadline: n.batchDeadline(calls)}, dead
}

// prune removes from the queue (under n.mu) the calls whose callers gave
// up, and returns them: a node that does not answer keeps calls queued
// for as long as the batch it waits on may take.
func (n *RedisNode) prune() []*call {
	var dead []*call
	kept := n.queue[:0]
	for _, c := range n.queue {
		if c.ctx.Err() != nil {
			dead = append(dead, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(n.queue[len(kept):])
	n.queue = kept
	n.pruneAt = max(2*len(kept), 2*n.maxBatch*n.pipelines)
	return dead
}

// push puts b on cn (under n.mu), to be written next, and counts it as a
// round trip. Its replies are awaited from now: sent is a moment early,
// which only widens what its TIME says of the node's clock.
func (n *RedisNode) push(cn *nodeConn, b *batch) {
	b.sent = mono()
	cn.pending = append(cn.pending, b)
	cn.unwritten = append(cn.unwritten, b)
	n.roundTrips.Add(1)
	n.sent.Add(uint64(len(b.calls)))
}

// arm bounds the connection's reads (under RedisNode.mu) by the deadline
// of the oldest batch still awaited (due): when it passes with no reply,
// the reader expires that batch, or ends the connection if no batch on it
// has time left (rearm). Once none is awaited the deadline set stays, so
// that a batch costs one change of it, not two: if it passes while the
// connection is idle, the reader passes over it (rearm).
func (cn *nodeConn) arm() {
	if len(cn.pending) == 0 {
		return
	}
	if d := cn.due(); !d.Equal(cn.armed) {
		cn.armed = d
		_ = cn.nc.SetReadDeadline(d) // fails only once closed, which the reader sees
	}
}

// due is the deadline cn's reads are bounded by (under RedisNode.mu): the
// oldest awaited batch's, the first not expired (nearly always the
// oldest); with every batch expired, the latest of theirs, which has
// passed; with none, zero.
func (cn *nodeConn) due() time.Time {
	var last time.Time
	for _, b := range cn.pending {
		if !b.expired {
			return b.deadline
		}
		last = later(last, b.deadline)
	}
	return last
}

// shift takes the oldest batch off cn's pending (under RedisNode.mu).
func (cn *nodeConn) shift() {
	m := copy(cn.pending, cn.pending[1:])
	cn.pending[m] = nil
	cn.pending = cn.pending[:m]
}

// answer delivers the replies of b, cn's oldest batch, once its reader
// read them all. A clock jump fails every call of the batch (clock.go);
// a TIME not answered with the time (ErrNoClock) fails every call but
// those that only give back (clockless), which read no clock. A reply read once its call's deadline passed fails too (unknown
// outcome), as it would had it come alone: a batch behind one with a
// later deadline is read by that one's, and its replies may wait in the
// reader's buffer past its own. The calls the node had no script for are
// sent again by source, first, within the same deadline; then the queue
// goes out, before the replies are delivered, so that the node works
// while they are.
func (n *RedisNode) answer(cn *nodeConn, b *batch, jumped error) {
	if b.expired { // its calls failed at its deadline (rearm): its replies are dropped
		n.mu.Lock()
		cn.shift()
		n.dispatch(nil)
		return
	}
	now := time.Now()
	noClock := errors.Is(jumped, ErrNoClock)
	failed := func(c *call) bool {
		return jumped != nil && !(noClock && clockless([]*call{c}))
	}
	var missing []*call
	if !b.source {
		for _, c := range b.calls {
			if !failed(c) && errors.Is(typed(c.reply), ErrNoScript) {
				missing = append(missing, c)
			}
		}
	}
	var again *batch
	late := len(missing) > 0 && !now.Before(b.deadline)
	if len(missing) > 0 && !late {
		again = &batch{calls: missing, source: true, timed: !clockless(missing), deadline: b.deadline}
	}
	n.mu.Lock()
	cn.shift()
	n.dispatch(again)
	for _, c := range b.calls {
		switch err := typed(c.reply); {
		case failed(c):
			c.fail(jumped) // its vote counts toward nothing: see clock.go
		case errors.Is(err, ErrNoScript) && late:
			c.fail(context.DeadlineExceeded)
		case errors.Is(err, ErrNoScript) && again != nil:
			// answered by the re-send
		case c.pastDeadline(now, b.deadline):
			c.fail(context.DeadlineExceeded)
		default:
			c.answer(c.val, err, cn.runID)
		}
	}
}

// dial connects to the node for the queued calls, and fails them if it
// cannot. A dial is bounded by the deadlines of the calls queued when it
// started (and DialTimeout, and Timeout); when theirs end it, the calls
// queued meanwhile with a later deadline get a dial of their own instead
// of its timeout.
func (n *RedisNode) dial() {
	start := time.Now()
	n.mu.Lock()
	deadline := n.batchDeadline(n.queue)
	n.mu.Unlock()
	cn, err := n.connect(deadline)
	n.mu.Lock()
	n.dialing = false
	if err != nil {
		var failed []*call
		kept := n.queue[:0]
		// Ended by its callers' deadlines, not by DialTimeout or Timeout.
		if deadline.Before(start.Add(min(n.dialTimeout, n.timeout))) && !time.Now().Before(deadline) {
			for _, c := range n.queue {
				if d, ok := c.ctx.Deadline(); c.ctx.Err() == nil && (!ok || d.After(deadline)) {
					kept = append(kept, c)
				} else {
					failed = append(failed, c)
				}
			}
		} else {
			failed = append(failed, n.queue...)
		}
		clear(n.queue[len(kept):])
		n.queue = kept
		if len(kept) > 0 {
			n.dialing = true
			n.workers.Go(n.dial)
		}
		n.idle.Broadcast()
		n.mu.Unlock()
		for _, c := range failed {
			c.fail(err)
		}
		return
	}
	n.conn = cn
	n.workers.Go(func() { n.read(cn) })
	n.dispatch(nil)
}

// batchDeadline bounds a batch by the latest deadline among its calls,
// capped by the node's Timeout (which also applies when a call has none).
func (n *RedisNode) batchDeadline(calls []*call) time.Time {
	limit := time.Now().Add(n.timeout)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return limit
		}
		latest = later(latest, d)
	}
	if latest.IsZero() || latest.After(limit) {
		return limit
	}
	return latest
}

// clockless reports whether every call of the batch gives something back
// (a release, a place in line, a turn): no vote of theirs grants or extends
// a lock, so their replies need not show the node's clock, and an
// uncontended cycle pays one TIME per node (its acquire's), not two. A jump
// is then seen at the node's next acquire, renewal or health probe.
func clockless(batch []*call) bool {
	for _, c := range batch {
		switch c.op.Kind {
		case quorum.OpRelease, quorum.OpLeave, quorum.OpTurnBack:
		default:
			return false
		}
	}
	return true
}
