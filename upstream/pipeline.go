package upstream

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/quorum"
)

// call is one operation waiting for a pipeline worker. It carries its
// caller's context only so the worker can skip abandoned calls and bound the
// pipeline by the callers' deadlines.
type call struct {
	ctx  context.Context
	op   *quorum.Op
	tag  int
	done chan<- quorum.Reply // has room for the reply: delivering never blocks
	// observe, when set, is told how long the call took (RedisOptions.Observe).
	observe func(time.Duration, error)
	start   time.Time
}

// fail answers the call with err.
func (c *call) fail(err error) { c.deliver(quorum.Reply{Tag: c.tag, Err: err}) }

// deliver hands r to the caller, after telling the observer.
func (c *call) deliver(r quorum.Reply) {
	if c.observe != nil {
		c.observe(time.Since(c.start), r.Err)
	}
	c.done <- r
}

// answer decodes the node's raw reply to the call's operation, answered by
// the node process inc (RedisNode.Incarnation).
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

// callErr is the error of a call that got its result: the caller's context
// error if it ended, else err with the node's address. A pipeline bounded by
// the caller's deadline can time out a moment before ctx.Err() is set, so a
// passed deadline counts as ended.
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

// work runs batches until Close, then runs what was queued before Close
// (each call within its own deadline) and stops: a release that returned
// once a majority answered still reaches the last nodes during a drain.
func (n *RedisNode) work() {
	w := &worker{n: n}
	defer w.drop()
	for {
		select {
		case c := <-n.calls:
			w.run(n.gather(c))
		case <-n.done:
			for {
				select {
				case c := <-n.calls:
					w.run(n.gather(c))
				default:
					return
				}
			}
		}
	}
}

// worker is one pipeline worker. While its batches follow each other
// closely, it sends them over one connection it keeps (a sticky
// redis.Conn): a round trip is then one write and the reads of its
// replies, where taking a connection from go-redis's pool checks it with a
// system call first. A connection that answered within the last
// reuseWithin is as alive as that check would find it (a node that
// restarts is down for longer); an older one goes back to the pool, which
// checks it before the next batch, so that a batch after a quiet spell
// does not fail on a connection the node closed meanwhile. A connection a
// batch found broken (or timed out on, leaving replies unread) is closed;
// the pool's OnConnect reads the node's run id whenever it dials.
type worker struct {
	n        *RedisNode
	conn     *redis.Conn // nil until the next batch takes one
	answered time.Time   // when conn last delivered a batch's replies
}

// reuseWithin is how recently a worker's connection must have answered
// for the next batch to use it unchecked.
const reuseWithin = time.Millisecond

// pipeline is a pipeline on the worker's connection.
func (w *worker) pipeline() redis.Pipeliner {
	if w.conn != nil && time.Since(w.answered) > reuseWithin {
		w.drop()
	}
	if w.conn == nil {
		w.conn = w.n.client.Conn()
	}
	return w.conn.Pipeline()
}

// drop gives the worker's connection back to the pool (or, if it broke,
// closes it).
func (w *worker) drop() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// check drops the connection unless every command got a reply from the
// node (a Redis error reply, such as NOSCRIPT, is a reply).
func (w *worker) check(cmds []*redis.Cmd) {
	var reply redis.Error
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.As(err, &reply) {
			w.drop()
			return
		}
	}
	w.answered = time.Now()
}

// gather adds to first whatever else is queued, without waiting, up to
// MaxBatch calls.
func (n *RedisNode) gather(first *call) []*call {
	batch := []*call{first}
	for len(batch) < n.maxBatch {
		select {
		case c := <-n.calls:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// run sends a batch by EVALSHA in one pipeline, then re-sends by EVAL, in a
// second pipeline, the calls the node had no script for.
func (w *worker) run(batch []*call) {
	n := w.n
	batch = live(batch)
	if len(batch) == 0 {
		return
	}
	ctx, cancel := n.batchContext(batch)
	defer cancel()
	batch = w.statuses(ctx, batch)
	if len(batch) == 0 {
		return
	}
	var missing []*call
	cmds, jumped := w.send(ctx, batch, false)
	inc := n.Incarnation() // read after the replies: see RedisNode.incarnation
	for i, cmd := range cmds {
		if jumped != nil {
			batch[i].fail(jumped) // its vote counts toward nothing: see clock.go
		} else if err := typed(cmd.Err()); errors.Is(err, ErrNoScript) {
			missing = append(missing, batch[i])
		} else {
			batch[i].answer(cmd.Val(), err, inc)
		}
	}
	if len(missing) == 0 {
		return
	}
	cmds, jumped = w.send(ctx, missing, true)
	inc = n.Incarnation()
	for i, cmd := range cmds {
		if jumped != nil {
			missing[i].fail(jumped)
		} else {
			missing[i].answer(cmd.Val(), typed(cmd.Err()), inc)
		}
	}
}

// statuses answers the batch's status reads, each in a pipeline of its
// own (they are rare: one a second per Redlock), and returns the others.
// They go through the pool, which the worker's connection goes back to
// first (the pool may hold no other: PoolSize defaults to Pipelines).
func (w *worker) statuses(ctx context.Context, batch []*call) []*call {
	kept := batch[:0]
	for _, c := range batch {
		if c.op.Kind == quorum.OpStatus {
			w.drop()
			w.n.status(ctx, c)
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

// live answers with their context's error the calls whose callers gave up
// already, and returns the others.
func live(batch []*call) []*call {
	kept := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.fail(err)
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

// batchContext bounds a pipeline by the latest deadline among its calls,
// capped by the node's Timeout (which also applies when a call has none).
func (n *RedisNode) batchContext(batch []*call) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(n.timeout)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = limit
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if latest.After(limit) {
		latest = limit
	}
	return context.WithDeadline(context.Background(), latest)
}

// send runs the batch's scripts in one pipeline, by source or by SHA1,
// followed by one TIME unless the batch only gives back (clockless). Each
// returned command carries its own reply or error; the error returned is
// a *quorum.ClockJumpError when the node's TIME shows that its clock
// jumped since its previous reply (clock.go).
func (w *worker) send(ctx context.Context, batch []*call, source bool) ([]*redis.Cmd, error) {
	n := w.n
	pipe := w.pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, c := range batch {
		s, keys, args := n.scriptFor(c.op)
		if source {
			cmds[i] = pipe.Eval(ctx, s.src, keys, args...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, s.sha, keys, args...)
		}
	}
	var now *redis.TimeCmd
	if !clockless(batch) {
		now = pipe.Time(ctx)
	}
	n.roundTrips.Add(1)
	n.sent.Add(uint64(len(batch)))
	sent := mono()
	_, _ = pipe.Exec(ctx) // the error is also set on each command
	jumped := n.clock.note(now, sent, mono())
	w.check(cmds)
	return cmds, jumped
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
