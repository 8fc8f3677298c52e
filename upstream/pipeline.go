package upstream

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one script run waiting for a pipeline worker. It carries its
// caller's context only so the worker can skip abandoned calls and bound the
// pipeline by the callers' deadlines.
type call struct {
	ctx    context.Context
	script *script
	keys   []string
	args   []any
	out    chan result // buffered 1: a late result to an abandoned call is dropped here
}

type result struct {
	val any
	err error
}

// deliver hands the call its result; it never blocks, as each call gets
// exactly one result.
func (c *call) deliver(v any, err error) { c.out <- result{val: v, err: err} }

// eval queues a script run for the pipeline workers and waits for its reply,
// ctx, or Close. It returns ctx.Err() itself when ctx ends first.
func (n *RedisNode) eval(ctx context.Context, s *script, keys []string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &call{ctx: ctx, script: s, keys: keys, args: args, out: make(chan result, 1)}
	select {
	case n.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.done:
		return nil, n.wrap(ErrClosed)
	}
	select {
	case r := <-c.out:
		return r.val, n.callErr(ctx, r.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.done:
		return nil, n.wrap(ErrClosed)
	}
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

// work runs batches until Close.
func (n *RedisNode) work() {
	for {
		select {
		case <-n.done:
			return
		case c := <-n.calls:
			n.run(n.gather(c))
		}
	}
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
func (n *RedisNode) run(batch []*call) {
	batch = live(batch)
	if len(batch) == 0 {
		return
	}
	ctx, cancel := n.batchContext(batch)
	defer cancel()
	var missing []*call
	for i, cmd := range n.send(ctx, batch, false) {
		if err := typed(cmd.Err()); errors.Is(err, ErrNoScript) {
			missing = append(missing, batch[i])
		} else {
			batch[i].deliver(cmd.Val(), err)
		}
	}
	if len(missing) == 0 {
		return
	}
	for i, cmd := range n.send(ctx, missing, true) {
		missing[i].deliver(cmd.Val(), typed(cmd.Err()))
	}
}

// live delivers their context's error to the calls whose callers gave up
// already and returns the others.
func live(batch []*call) []*call {
	kept := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.deliver(nil, err)
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

// send runs the batch's scripts in one pipeline, by source or by SHA1. Each
// returned command carries its own reply or error.
func (n *RedisNode) send(ctx context.Context, batch []*call, source bool) []*redis.Cmd {
	pipe := n.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, c := range batch {
		if source {
			cmds[i] = pipe.Eval(ctx, c.script.src, c.keys, c.args...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, c.script.sha, c.keys, c.args...)
		}
	}
	n.roundTrips.Add(1)
	n.sent.Add(uint64(len(batch)))
	_, _ = pipe.Exec(ctx) // the error is also set on each command
	return cmds
}
