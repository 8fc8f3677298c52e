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
// client uses LOCK/RENEW/UNLOCK; a legacy one SET NX PX and the
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
		r := c.conns[c.rng.IntN(len(c.conns))]
		if c.legacy {
			c.legacyCycle(ctx, r, key)
		} else if c.retries {
			c.retryCycle(ctx, key)
		} else {
			c.nativeCycle(ctx, r, key)
		}
	}
}

// do sends one command, counting it and its error.
func (c *client) do(r *redis.Client, args ...any) (any, error) {
	c.s.ops.Add(1)
	v, err := r.Do(context.Background(), args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		c.s.fail(err)
		time.Sleep(errorPause)
	}
	return v, err
}

func (c *client) nativeCycle(ctx context.Context, r *redis.Client, key string) {
	sent := time.Now()
	v, err := c.do(r, "LOCK", key, "PX", c.ttl.Milliseconds(), "WAIT", waitMs)
	if err != nil {
		return
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 3 {
		c.s.fail(fmt.Errorf("LOCK replied %v", v))
		return
	}
	token, _ := reply[0].(string)
	fence, _ := reply[1].(int64)
	validity, _ := reply[2].(int64)
	g := c.granted(grant{Key: key, Token: token, Fence: fence, Recv: time.Now(), End: sent.Add(time.Duration(validity) * time.Millisecond)})
	if g == nil {
		return
	}
	c.hold(ctx, g, c.holdTime(c.ttl*3/2), func() bool { return c.renew(r, g) })
	c.release(g, r, "UNLOCK", key, token)
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
func (c *client) renew(r *redis.Client, g *grant) bool {
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
func (c *client) release(g *grant, r *redis.Client, args ...any) {
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
