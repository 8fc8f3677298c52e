package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

var errDown = errors.New("node down")

// fakeNode is an in-memory Node with injected faults.
type fakeNode struct {
	name string

	mu      sync.Mutex
	down    bool          // every call fails at once
	delay   time.Duration // every call waits this long first
	hang    chan struct{} // if set, calls block until it is closed or ctx is done
	entries map[string]*fakeEntry
	undone  map[string]bool // attempts a release marked undone
	counter map[string]int64
	// metas is when each key's meta ends: the scripts keep it
	// Op.MetaFor past the key's TTL, and a release leaves it (keepMeta).
	metas   map[string]time.Time
	commits int // Commit calls served
	// taken, if set, is called with f.mu held when an acquire takes a key,
	// as acquire.lua raises the key's release mark (healNode).
	taken func(key string)
	// paused: calls are queued unapplied, and their callers get their
	// context's error when it ends, as with a SIGSTOPped Redis whose
	// connection the caller dropped; resume applies them.
	paused bool
	queued []func()
	// What the restart rule reads (OpStatus) and writes (OpFloor); see
	// restartEmpty. run also marks every reply (Reply.Incarnation).
	run     string
	uptime  time.Duration
	durable bool
	vetted  string
	floor   int64
	// raisedAt is the node's largest counter right after the last OpFloor,
	// recorded for raisedFor, the run id it named (floor.lua's vetted
	// floor).
	raisedAt  int64
	raisedFor string
}

// restartEmpty restarts the node as a Redis without persistence does: a
// new run id, no uptime, and nothing it held before.
func (f *fakeNode) restartEmpty(run string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.run, f.uptime, f.vetted, f.floor = run, 0, "", 0
	f.raisedAt, f.raisedFor = 0, ""
	f.entries, f.counter, f.undone, f.metas = map[string]*fakeEntry{}, map[string]int64{}, map[string]bool{}, map[string]time.Time{}
}

// keepMeta writes key's meta, as the scripts that write it do, for ttl
// plus grace (Op.MetaFor), with f.mu held.
func (f *fakeNode) keepMeta(key string, ttl, grace time.Duration) {
	f.metas[key] = time.Now().Add(ttl + grace)
}

// metaLeft reports whether key's meta is still there, with f.mu held.
func (f *fakeNode) metaLeft(key string) bool {
	return time.Now().Before(f.metas[key])
}

// status answers OpStatus, and floor OpFloor.
func (f *fakeNode) status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := Status{RunID: f.run, Uptime: f.uptime, Durable: f.durable, Vetted: f.vetted, FenceMax: f.top()}
	if f.raisedFor == f.run {
		s.Floor = f.raisedAt
	}
	s.Recorded = f.raisedAt
	return s
}

// top is the node's largest counter, with f.mu held.
func (f *fakeNode) top() int64 {
	top := f.floor
	for _, c := range f.counter {
		top = max(top, c)
	}
	return top
}

// raised is the node's fence floor and the run id it was raised for.
func (f *fakeNode) raised() (int64, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.floor, f.vetted
}

// raiseFloor answers OpFloor as floor.lua: it raises the floor, records
// run as vetted and, for it, the node's counter after the raise, unless
// it records one for run already (its first raise) or run was vetted
// already without one, and returns the counter recorded (0 for none). No
// floor (RestartedMark) leaves the record as it is.
func (f *fakeNode) raiseFloor(floor int64, run string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.vetted
	f.floor, f.vetted = max(f.floor, floor), run
	switch {
	case floor <= 0:
		return 0
	case f.raisedFor == run:
		return f.raisedAt
	case was == run:
		return 0 // vetted by a build that records no floor (oldBuildVet)
	}
	f.raisedAt, f.raisedFor = f.top(), run
	return f.raisedAt
}

// oldBuildVet raises the floor and records run as vetted as a build
// before the vetted floor does (up to 65a4181): no record.
func (f *fakeNode) oldBuildVet(floor int64, run string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.floor, f.vetted = max(f.floor, floor), run
}

// pause makes the node queue calls without applying them.
func (f *fakeNode) pause() { f.mu.Lock(); f.paused = true; f.mu.Unlock() }

// resume applies the queued calls, in reverse order if reverse (a call on
// a dropped connection may run after a later one), and serves calls again.
func (f *fakeNode) resume(reverse bool) {
	f.mu.Lock()
	q := f.queued
	f.queued, f.paused = nil, false
	f.mu.Unlock()
	if reverse {
		slices.Reverse(q)
	}
	for _, apply := range q {
		apply()
	}
}

type fakeEntry struct {
	Entry
	ttl     time.Duration
	expires time.Time
	attempt string // the last acquire that took or refreshed it
	took    bool   // whether that acquire took it
}

var _ Node = (*fakeNode)(nil)

func newFakeNodes(n int) []*fakeNode {
	nodes := make([]*fakeNode, n)
	for i := range nodes {
		nodes[i] = &fakeNode{name: fmt.Sprintf("fake%d", i), entries: map[string]*fakeEntry{}, undone: map[string]bool{}, counter: map[string]int64{}, metas: map[string]time.Time{}}
	}
	return nodes
}

func asNodes(fs []*fakeNode) []Node {
	ns := make([]Node, len(fs))
	for i, f := range fs {
		ns[i] = f
	}
	return ns
}

func (f *fakeNode) String() string { return f.name }

func (f *fakeNode) setDown(d bool) { f.mu.Lock(); f.down = d; f.mu.Unlock() }

// enter applies the injected faults and returns with f.mu held.
func (f *fakeNode) enter(ctx context.Context) error {
	f.mu.Lock()
	down, delay, hang := f.down, f.delay, f.hang
	f.mu.Unlock()
	if down {
		return errDown
	}
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	return nil
}

// live returns key's entry if it has not expired.
func (f *fakeNode) live(key string) *fakeEntry {
	e := f.entries[key]
	if e == nil || time.Now().After(e.expires) {
		delete(f.entries, key)
		return nil
	}
	return e
}

func (f *fakeNode) holds(key, token string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.live(key)
	return e != nil && e.Token == token
}

func (f *fakeNode) Acquire(ctx context.Context, key string, h engine.Hold, attempt string) (Claim, error) {
	if err := f.enter(ctx); err != nil {
		return Claim{}, err
	}
	defer f.mu.Unlock()
	f.counter[key] = max(f.counter[key], f.floor)
	c := Claim{Counter: f.counter[key]}
	switch e := f.live(key); {
	case f.undone[attempt]:
	case e == nil:
		f.counter[key]++
		c.Counter = f.counter[key]
		f.entries[key] = &fakeEntry{Entry{Token: h.Token, Fence: c.Counter, Mode: h.Mode, Name: h.Name}, h.TTL, time.Now().Add(h.TTL), attempt, true}
		c.State, c.Fence = Acquired, c.Counter
		if f.taken != nil {
			f.taken(key)
		}
	case e.Token == h.Token && !h.Fresh:
		e.ttl, e.expires, e.attempt, e.took = h.TTL, time.Now().Add(h.TTL), attempt, false
		c.State, c.Fence = Mine, e.Fence
	default:
		c.Held = time.Until(e.expires)
	}
	return c, nil
}

func (f *fakeNode) Commit(ctx context.Context, key, token, attempt string, fence int64) (bool, error) {
	if err := f.enter(ctx); err != nil {
		return false, err
	}
	defer f.mu.Unlock()
	f.commits++
	f.counter[key] = max(f.counter[key], fence)
	e := f.live(key)
	if e == nil || e.Token != token {
		return false, nil
	}
	if attempt != "" && e.attempt == attempt {
		e.Fence = fence // commit.lua: the last attempt records its own fence
	} else {
		e.Fence = max(e.Fence, fence)
	}
	return true, nil
}

func (f *fakeNode) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	if err := f.enter(ctx); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	e := f.live(key)
	if e == nil || e.Token != token {
		return 0, nil
	}
	if mode == engine.Bound && e.Mode == engine.Lease {
		return -time.Millisecond, nil
	}
	if ttl == 0 {
		ttl = e.ttl
	}
	e.ttl = ttl
	e.expires = time.Now().Add(ttl)
	e.took = false // extended: no rollback deletes it (extend.lua)
	if mode != "" {
		e.Mode = mode
	}
	return ttl, nil
}

func (f *fakeNode) Release(ctx context.Context, key, token, attempt, undo string, rollback bool) (bool, string, error) {
	if err := f.enter(ctx); err != nil {
		return false, "", err
	}
	defer f.mu.Unlock()
	e := f.live(key)
	if undo != "" && (e == nil || e.attempt != undo) {
		f.undone[undo] = true
	}
	if e == nil || e.Token != token || attempt != "" && (e.attempt != attempt || rollback && !e.took) {
		return false, "", nil
	}
	delete(f.entries, key)
	return true, e.attempt, nil
}

func (f *fakeNode) Inspect(ctx context.Context, key string) (Entry, bool, error) {
	if err := f.enter(ctx); err != nil {
		return Entry{}, false, err
	}
	defer f.mu.Unlock()
	e := f.live(key)
	if e == nil {
		return Entry{}, false, nil
	}
	out := e.Entry
	out.TTL = time.Until(e.expires)
	return out, true, nil
}

// Do runs op in its own goroutine, as a real node answers independently.
// A node down when op is sent fails it, however late the goroutine runs:
// otherwise a test that brings the node back up right after a call returns
// could see the straggler land.
func (f *fakeNode) Do(ctx context.Context, op *Op, tag int, done Sink) {
	f.mu.Lock()
	down, paused := f.down, f.paused
	if paused {
		f.queued = append(f.queued, func() { f.apply(context.Background(), op, tag, make(Replies, 1)) })
	}
	f.mu.Unlock()
	if paused {
		go func() { <-ctx.Done(); done.Put(Reply{Tag: tag, Err: ctx.Err()}) }()
		return
	}
	if down {
		go func() { done.Put(Reply{Tag: tag, Err: errDown}) }()
		return
	}
	go f.apply(ctx, op, tag, done)
}

// apply runs op on the node and replies to done.
func (f *fakeNode) apply(ctx context.Context, op *Op, tag int, done Sink) {
	{
		f.mu.Lock()
		r := Reply{Tag: tag, Incarnation: f.run}
		f.mu.Unlock()
		switch {
		case op.Kind == OpStatus:
			r.Status = f.status()
		case op.Kind == OpFloor:
			r.Claim.Counter = f.raiseFloor(op.Fence, op.Token)
			r.OK = true
		case op.Kind == OpAcquire:
			r.Claim, r.Err = f.Acquire(ctx, op.Key, op.Hold, op.Attempt)
			if r.Err == nil && (r.Claim.State == Acquired || r.Claim.State == Mine) {
				f.mu.Lock()
				f.keepMeta(op.Key, op.Hold.TTL, op.MetaFor)
				f.mu.Unlock()
			}
		case op.Kind == OpCommit:
			r.OK, r.Err = f.Commit(ctx, op.Key, op.Token, op.Attempt, op.Fence)
		case op.Kind == OpExtend:
			r.TTL, r.Err = f.Extend(ctx, op.Key, op.Token, op.TTL, op.Mode)
		case op.Kind == OpRelease:
			r.OK, r.Attempt, r.Err = f.Release(ctx, op.Key, op.Token, op.Attempt, op.Undo, op.Rollback)
		case op.Kind == OpInspect:
			r.Entry, r.OK, r.Err = f.Inspect(ctx, op.Key)
		}
		done.Put(r)
	}
}
