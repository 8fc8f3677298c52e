package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Error kinds, the table's columns.
const (
	errNoQuorum = iota // -NOQUORUM, -UNAVAILABLE: nothing was granted
	errTimeout         // -TIMEOUT, or no reply in time: the outcome is unknown
	errLockLost        // -LOCKLOST
	errConn            // the connection was refused or broken (an instance down)
	errOther
	numErrKinds
)

var errKindNames = [numErrKinds]string{"noquorum", "timeout", "locklost", "conn", "other"}

// releaseScript is the compare-and-delete of the redis.io lock page, which
// lockproxy maps onto a release.
const releaseScript = `if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end`

// Client timing.
const (
	waitMs      = 1000                                    // a native client's LOCK ... WAIT
	readTimeout = 4*time.Second + waitMs*time.Millisecond // lockproxy's op timeout is 5 s
	writeEvery  = 20 * time.Millisecond                   // a holder's writes to the register
	errorPause  = 50 * time.Millisecond                   // after an error, before the next try
	shortHold   = 100 * time.Millisecond                  // most holds are shorter
	longOdds    = 4                                       // one hold in longOdds may be long
)

// stats are the counters of a run, shared by its clients.
type stats struct {
	ops, grants atomic.Int64
	errs        [numErrKinds]atomic.Int64
	mu          sync.Mutex
	samples     map[int][]string // a few error texts per kind
	zk          retryCounts      // the retrying clients' (zkretry.go)
}

func (s *stats) fail(err error) {
	k := errKind(err)
	s.errs[k].Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples[k]) < 3 {
		s.samples[k] = append(s.samples[k], err.Error())
	}
}

// errKind sorts an error into a column.
func errKind(err error) int {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case errors.As(err, &rerr):
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "NOQUORUM"), strings.HasPrefix(msg, "UNAVAILABLE"):
			return errNoQuorum
		case strings.HasPrefix(msg, "TIMEOUT"):
			return errTimeout
		case strings.HasPrefix(msg, "LOCKLOST"):
			return errLockLost
		}
		return errOther
	case errors.As(err, &nerr) && nerr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return errTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return errConn
	}
	return errOther
}

// client takes locks on keys through any instance, holds each a while,
// writing to the register under its fence, and releases it. A native
// client uses LOCK/RENEW/UNLOCK, with a token of its own that it sends
// again when it does not learn the outcome (lockRetries); it takes one
// lock in boundOdds connection-bound. A legacy one SET NX PX and the
// compare-and-delete script (no fence, so its writes are not fenced: it is
// checked for overlaps only).
type client struct {
	legacy bool
	keys   []string
	conns  []*redis.Client // one per instance
	ttl    time.Duration
	h      *history
	s      *stats
	rng    *mrand.Rand

	retries bool // a ZooKeeper client that retries with TOKEN and changes modes (zkretry.go)
}

func newClient(legacy bool, keys, addrs []string, ttl time.Duration, h *history, s *stats, seed uint64) *client {
	c := &client{legacy: legacy, keys: keys, ttl: ttl, h: h, s: s, rng: mrand.New(mrand.NewPCG(seed, 1))}
	for _, a := range addrs {
		c.conns = append(c.conns, redis.NewClient(&redis.Options{
			Addr: a, MaxRetries: -1, PoolSize: 2, DialTimeout: time.Second,
			ReadTimeout: readTimeout, WriteTimeout: time.Second,
		}))
	}
	return c
}

func (c *client) close() {
	for _, r := range c.conns {
		r.Close()
	}
}

// run cycles until ctx ends; the cycle under way finishes first (each of
// its requests is bounded by the client's timeouts).
func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		key := c.keys[c.rng.IntN(len(c.keys))]
		i := c.rng.IntN(len(c.conns))
		if c.legacy {
			c.legacyCycle(ctx, c.conns[i], key)
		} else if c.retries {
			c.retryCycle(ctx, key)
		} else {
			c.nativeCycle(ctx, i, key)
		}
	}
}

// doer is one instance's pooled client, or one connection to it.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// do sends one command, counting it and its error.
func (c *client) do(r doer, args ...any) (any, error) {
	c.s.ops.Add(1)
	v, err := r.Do(context.Background(), args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		c.s.fail(err)
		time.Sleep(errorPause)
	}
	return v, err
}

// lockRetries is how many times a native client sends its LOCK again,
// with the same token, as client libraries do: after an unknown outcome (a
// timeout, a broken connection) through another instance, after NOQUORUM
// through the same one.
const lockRetries = 3

// retryAfter says whether to send a LOCK again after err (again), and
// whether through another instance (other) rather than the same one.
func retryAfter(err error) (again, other bool) {
	switch errKind(err) {
	case errTimeout, errConn:
		return true, true
	case errNoQuorum:
		return true, false
	}
	return false, false
}

// boundOdds is how often (one cycle in boundOdds) a native client takes a
// connection-bound lock, on a connection of its own, rather than a lease.
const boundOdds = 3

func (c *client) nativeCycle(ctx context.Context, i int, key string) {
	if c.rng.IntN(boundOdds) == 0 {
		c.boundCycle(ctx, i, key)
		return
	}
	r := c.conns[i]
	token := newToken()
	var v any
	var err error
	var sent time.Time
	for try := 0; try <= lockRetries; try++ {
		sent = time.Now()
		v, err = c.do(r, "LOCK", key, "PX", c.ttl.Milliseconds(), "WAIT", waitMs, "TOKEN", token)
		again, other := retryAfter(err)
		if !again {
			break
		}
		if other {
			i = (i + 1) % len(c.conns)
			r = c.conns[i]
		}
	}
	g := c.lockReply(key, v, err, sent)
	if g == nil {
		return
	}
	c.hold(ctx, g, c.holdTime(c.ttl*3/2), func() bool { return c.renew(r, g) })
	c.release(g, r, "UNLOCK", key, g.Token)
}

// boundCycle takes key connection-bound on a connection of its own; a LOCK
// whose outcome is unknown is sent again, with the same token, on a new
// connection to another instance and the old connection is closed, as a
// client that gave up on it does. The lock is held within the validity it
// was granted with (the watchdog renews it meanwhile), released with
// UNLOCK, and its connection closed.
func (c *client) boundCycle(ctx context.Context, i int, key string) {
	token := newToken()
	conn := c.conns[i].Conn()
	defer func() { conn.Close() }()
	var v any
	var err error
	var sent time.Time
	for try := 0; try <= lockRetries; try++ {
		sent = time.Now()
		v, err = c.do(conn, "LOCK", key, "WAIT", waitMs, "TOKEN", token)
		again, other := retryAfter(err)
		if !again {
			break
		}
		if other {
			conn.Close()
			i = (i + 1) % len(c.conns)
			conn = c.conns[i].Conn()
		}
	}
	g := c.lockReply(key, v, err, sent)
	if g == nil {
		return
	}
	c.hold(ctx, g, c.holdTime(c.ttl*3/2), nil)
	c.release(g, conn, "UNLOCK", key, g.Token)
}

// lockReply records LOCK's reply v to a request sent at sent as a grant;
// nil if it was not one.
func (c *client) lockReply(key string, v any, err error, sent time.Time) *grant {
	if err != nil {
		return nil
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 3 {
		c.s.fail(fmt.Errorf("LOCK replied %v", v))
		return nil
	}
	token, _ := reply[0].(string)
	fence, _ := reply[1].(int64)
	validity, _ := reply[2].(int64)
	return c.granted(grant{Key: key, Token: token, Fence: fence, Recv: time.Now(), End: sent.Add(time.Duration(validity) * time.Millisecond)})
}

func (c *client) legacyCycle(ctx context.Context, r *redis.Client, key string) {
	token := newToken()
	sent := time.Now()
	_, err := c.do(r, "SET", key, token, "NX", "PX", c.ttl.Milliseconds())
	if errors.Is(err, redis.Nil) {
		time.Sleep(time.Duration(20+c.rng.IntN(50)) * time.Millisecond)
		return
	}
	if err != nil {
		return
	}
	drift := c.ttl/100 + 2*time.Millisecond // Redlock's margin for clock drift
	g := c.granted(grant{Key: key, Token: token, Recv: time.Now(), End: sent.Add(c.ttl - drift)})
	if g == nil {
		return
	}
	c.hold(ctx, g, c.holdTime(c.ttl/2), nil)
	c.release(g, r, "EVAL", releaseScript, 1, key, token)
}

// holdTime is how long to hold a grant: mostly short (under shortHold),
// so that grants are many, and one time in longOdds up to long, so that
// some holds span faults, renewals and expiries.
func (c *client) holdTime(long time.Duration) time.Duration {
	if c.rng.IntN(longOdds) == 0 {
		return time.Duration(c.rng.Int64N(int64(long)))
	}
	return time.Duration(c.rng.Int64N(int64(shortHold)))
}

// granted records a grant; nil if it arrived already expired.
func (c *client) granted(g grant) *grant {
	p := c.h.granted(g)
	if !g.live() {
		return nil
	}
	c.s.grants.Add(1)
	return p
}

// hold keeps g for up to d, writing to the register under its fence (a
// legacy grant has none, and does not write); renew, when set, is called
// when less than half the TTL is left, and false ends the hold.
func (c *client) hold(ctx context.Context, g *grant, d time.Duration, renew func() bool) {
	stop := time.Now().Add(d)
	for time.Now().Before(stop) && ctx.Err() == nil {
		if renew != nil && time.Until(c.h.end(g)) < c.ttl/2 {
			if !renew() {
				return
			}
		}
		if g.Fence != 0 && !c.h.writeHeld(g) {
			return
		}
		if g.Fence == 0 && !time.Now().Before(c.h.end(g)) {
			return
		}
		time.Sleep(writeEvery)
	}
}

// renew extends g; false when the lease is lost or the outcome unknown.
func (c *client) renew(r doer, g *grant) bool {
	sent := time.Now()
	v, err := c.do(r, "RENEW", g.Key, g.Token, "PX", c.ttl.Milliseconds())
	if validity, ok := v.(int64); ok && err == nil {
		c.h.setEnd(g, maxTime(c.h.end(g), sent.Add(time.Duration(validity)*time.Millisecond)))
		return true
	}
	if errors.Is(err, redis.Nil) || errKind(err) == errLockLost {
		c.h.setEnd(g, minTime(c.h.end(g), sent)) // told it is lost: no longer held
	}
	return false
}

// release ends g now, then sends the release.
func (c *client) release(g *grant, r doer, args ...any) {
	c.h.setEnd(g, minTime(c.h.end(g), time.Now()))
	_, _ = c.do(r, args...)
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
