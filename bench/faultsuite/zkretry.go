package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A retrying client (ZooKeeper runs, issue 25) exercises what random
// faults alone do not: a retry with TOKEN through another instance after
// an error, and mode changes (lease ↔ connection-bound) on the same token.
// It chooses its own token, so that a LOCK whose outcome is unknown can be
// retried through the next instance, up to retryTries times; a grant from
// any of the tries is the one it holds. While holding, each time its
// validity runs low it either renews (RENEW … PX, a lease) or changes the
// lock's mode with LOCK … TOKEN through a random instance: to
// connection-bound (no PX) from a lease, to a lease (PX) from bound. A
// mode change's reply replaces the validity the client counts on (a bound
// lock's is the instance's session timeout, counted from the send); a
// mode change that fails ends the hold, since the lock may have taken the
// other, shorter-lived mode.

// retryTries bounds the tries of one LOCK, each through the next instance.
const retryTries = 3

// retryCounts count what the retrying clients did, for the run's report.
type retryCounts struct {
	retried, retryGrants, toBound, toLease, changeFailed atomic.Int64
}

// reportRetries prints the retrying clients' counts of a run to w.
func reportRetries(w io.Writer, fault string, s *stats) {
	r := &s.zk
	fmt.Fprintf(w, "faultsuite: %s: retrying clients: %d LOCKs retried through another instance, %d granted on a retry; mode changes: %d to bound, %d to lease, %d failed\n",
		fault, r.retried.Load(), r.retryGrants.Load(), r.toBound.Load(), r.toLease.Load(), r.changeFailed.Load())
}

// retryCycle is one cycle of a retrying client on key.
func (c *client) retryCycle(ctx context.Context, key string) {
	token := newToken()
	at := c.rng.IntN(len(c.conns))
	g, at := c.lockRetry(key, token, at)
	if g == nil {
		return
	}
	held, bound := true, false
	for range c.rng.IntN(3) { // 0 to 2 changes at once: most holds are short
		if held {
			held, bound = c.change(g, bound)
		}
	}
	if held {
		c.hold(ctx, g, c.holdTime(c.ttl*3/2), func() bool {
			held, bound = c.changeOrRenew(g, bound)
			return held
		})
	}
	c.release(g, c.conns[at], "UNLOCK", key, token)
}

// lockRetry takes key with token, a lease of the client's ttl, waiting up
// to waitMs half the time (a wait outlasts a passing outage, so the other
// half tries once, and sees the errors a retry is for); after an error it
// retries the same LOCK through the next instance. It returns the grant,
// recorded, and the instance that gave it; nil when the key was not
// granted (a null reply, or every try failed).
func (c *client) lockRetry(key, token string, at int) (*grant, int) {
	args := []any{"LOCK", key, "PX", c.ttl.Milliseconds(), "TOKEN", token}
	wait := c.rng.IntN(2) == 0
	if wait {
		args = append(args, "WAIT", waitMs)
	}
	for try := range retryTries {
		if try > 0 {
			c.s.zk.retried.Add(1)
		}
		sent := time.Now()
		v, err := c.do(c.conns[at], args...)
		switch {
		case errors.Is(err, redis.Nil):
			if !wait {
				time.Sleep(time.Duration(20+c.rng.IntN(50)) * time.Millisecond)
			}
			return nil, at
		case err == nil:
			g, ok := c.grantOf(key, sent, v)
			if !ok {
				return nil, at
			}
			if try > 0 {
				c.s.zk.retryGrants.Add(1)
			}
			return c.granted(g), at
		}
		at = (at + 1) % len(c.conns)
	}
	return nil, at
}

// grantOf is the grant a LOCK reply v, to a request sent at sent, says.
func (c *client) grantOf(key string, sent time.Time, v any) (grant, bool) {
	reply, ok := v.([]any)
	if !ok || len(reply) != 3 {
		c.s.fail(fmt.Errorf("LOCK replied %v", v))
		return grant{}, false
	}
	token, _ := reply[0].(string)
	fence, _ := reply[1].(int64)
	validity, _ := reply[2].(int64)
	return grant{Key: key, Token: token, Fence: fence, Recv: time.Now(), End: sent.Add(time.Duration(validity) * time.Millisecond)}, true
}

// changeOrRenew renews g, a lease (bound false) or a connection-bound
// lock, or changes its mode, through a random instance; it reports
// whether g is still held and its mode now.
func (c *client) changeOrRenew(g *grant, bound bool) (held, nowBound bool) {
	if !bound && c.rng.IntN(2) == 0 {
		return c.renew(c.conns[c.rng.IntN(len(c.conns))], g), false
	}
	return c.change(g, bound)
}

// change makes g, a lease (bound false) or a connection-bound lock, the
// other mode with LOCK … TOKEN through a random instance; it reports
// whether g is still held and its mode now.
func (c *client) change(g *grant, bound bool) (held, nowBound bool) {
	end := c.h.end(g)
	if !time.Now().Before(end) { // ran out: a LOCK now is a new grant
		return false, bound
	}
	r := c.conns[c.rng.IntN(len(c.conns))]
	args := []any{"LOCK", g.Key, "TOKEN", g.Token}
	if bound {
		args = []any{"LOCK", g.Key, "PX", c.ttl.Milliseconds(), "TOKEN", g.Token}
	}
	sent := time.Now()
	v, err := c.do(r, args...)
	next, ok := grant{}, false
	if err == nil {
		next, ok = c.grantOf(g.Key, sent, v)
	}
	if ok && next.Fence != g.Fence {
		// A reply within g's validity: g cannot have run out, so a new
		// fence is an anomaly. After it, the LOCK may have been held up
		// (an instance cut off) while g ran out and was deleted: it is
		// then a new grant, rightly with a new fence, and g is lost.
		if next.Recv.Before(end) {
			c.s.fail(fmt.Errorf("mode change of %s: fence %d, then %d", g.Key, g.Fence, next.Fence))
		}
		ok = false
	}
	if !ok {
		c.s.zk.changeFailed.Add(1)
		c.h.setEnd(g, minTime(c.h.end(g), sent)) // not held, or maybe in the other mode: stop
		return false, bound
	}
	if bound {
		c.s.zk.toLease.Add(1)
	} else {
		c.s.zk.toBound.Add(1)
	}
	c.h.setEnd(g, next.End)
	return true, !bound
}
