package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// contendSpec is one phase of the contended case: clients loop on one
// shared key, each acquiring it, holding it for hold and releasing it.
type contendSpec struct {
	clients  int
	hold     time.Duration
	duration time.Duration // wall-clock bound of the phase
	attempts int64         // most lock attempts in the phase, over all clients
	timeout  time.Duration // bound of one release
	phase    string        // "warmup" or "run"; part of the key
}

// grant is one acquisition in the contended case, on the phase's clock: the
// monotonic time since the phase started, which all clients share.
type grant struct {
	asked    time.Duration // LOCK sent / Lock called
	granted  time.Duration // LOCK's reply received / Lock returned
	released time.Duration // UNLOCK's reply received / Unlock returned
}

// contendOutcome is what one contended phase measured.
type contendOutcome struct {
	impl      string
	elapsed   time.Duration   // wall time of the phase
	perClient []int64         // grants of each client
	wait      []time.Duration // asked to granted, sorted
	gap       []time.Duration // handoff gaps, sorted
	held      []time.Duration // granted to released, sorted
	behind    []time.Duration // waits of the grants that waited for another client's, sorted
	gaveUp    int64           // attempts that ended without the lock
	errors    int64           // failed lock or release attempts
	errs      errorLog
	cost      costs // spent during the phase
}

func (o contendOutcome) grants() int64 {
	var n int64
	for _, c := range o.perClient {
		n += c
	}
	return n
}

// rate is grants per second.
func (o contendOutcome) rate() float64 {
	if o.elapsed <= 0 {
		return 0
	}
	return float64(o.grants()) / o.elapsed.Seconds()
}

// contendClient is one client of a contended phase and what it recorded.
type contendClient struct {
	c      contender
	grants []grant
	gaveUp int64
	failed int64
	errs   errorLog
}

// measureContended runs s.clients clients of t on one key until s.duration
// passed, s.attempts were started, or ctx ends, whichever comes first; an
// attempt under way then still finishes. Every grant is kept (the attempts
// bound the memory).
func measureContended(ctx context.Context, t *target, s contendSpec) contendOutcome {
	runtime.GC() // start every phase with the same heap debt
	key := fmt.Sprintf("bench:%s:%s:contended:n%d", t.name, s.phase, s.clients)
	clients := make([]*contendClient, s.clients)
	for i := range clients {
		clients[i] = &contendClient{c: t.contend(key)}
	}
	var budget atomic.Int64
	budget.Store(s.attempts)
	clock := time.Now()
	deadline := clock.Add(s.duration)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { c.loop(ctx, s, clock, &budget, deadline) })
	}
	wg.Wait()
	elapsed := time.Since(clock)
	for _, c := range clients {
		_ = c.c.close() // a client's connections only: nothing is lost
	}
	return collectContended(t.name, elapsed, clients)
}

func (c *contendClient) loop(ctx context.Context, s contendSpec, clock time.Time, budget *atomic.Int64, deadline time.Time) {
	for budget.Add(-1) >= 0 && ctx.Err() == nil && time.Now().Before(deadline) {
		c.one(ctx, s, clock)
	}
}

// one acquires the key, holds it for s.hold and releases it, recording the
// times on clock. The release runs even if ctx ends meanwhile.
func (c *contendClient) one(ctx context.Context, s contendSpec, clock time.Time) {
	lockCtx, cancel := context.WithTimeout(ctx, waitBound+waitMargin)
	defer cancel()
	g := grant{asked: time.Since(clock)}
	err := c.c.lock(lockCtx)
	g.granted = time.Since(clock)
	if err != nil {
		c.lockFailed(err)
		return
	}
	pause(ctx, s.hold)
	unlockCtx, cancelUnlock := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancelUnlock()
	err = c.c.unlock(unlockCtx)
	g.released = time.Since(clock)
	c.grants = append(c.grants, g)
	if err != nil {
		c.failed++
		c.errs.add(err)
	}
}

func (c *contendClient) lockFailed(err error) {
	if errors.Is(err, errNotAcquired) {
		c.gaveUp++
		return
	}
	c.failed++
	c.errs.add(err)
}

// pause holds the lock for d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// collectContended merges the clients' grants, counts and errors.
func collectContended(impl string, elapsed time.Duration, clients []*contendClient) contendOutcome {
	o := contendOutcome{impl: impl, elapsed: elapsed}
	var all []grant
	for _, c := range clients {
		all = append(all, c.grants...)
		o.perClient = append(o.perClient, int64(len(c.grants)))
		o.gaveUp += c.gaveUp
		o.errors += c.failed
		o.errs.merge(c.errs)
	}
	o.wait = waits(all)
	o.gap = handoffGaps(all)
	o.held = helds(all)
	o.behind = waitsBehind(all)
	return o
}
