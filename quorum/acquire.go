package quorum

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Acquire takes key on a majority of nodes and gives it a fencing token.
//
// Phase one takes the key on every node where it is free; each node raises
// its fencing counter by one and records the new value as the lock's fence
// in the same atomic step. When the first majority of nodes to take it all
// report the same value, that value is the fence, already recorded on a
// majority of holders. Otherwise (the counters had drifted apart — a node
// missed grants, or, where a node keeps one counter for all its keys as
// upstream does, grants of other keys reached the nodes in different
// orders — or this is a retry by the holder) phase two commits the fence
// to every node, which also brings their counters together again: it
// raises each counter to it and succeeds only where the token still holds
// the key. The grant needs a quorum in each phase it runs and a positive
// validity; otherwise every node is rolled back. README.md ("Fencing
// tokens") explains why the fence strictly increases.
func (r *Redlock) Acquire(ctx context.Context, key string, h engine.Hold) (engine.Grant, error) {
	if err := r.checkLease(h.TTL); err != nil {
		return engine.Grant{}, err
	}
	start := time.Now()
	attempt := engine.NewToken()
	c, err := r.claim(ctx, key, h, attempt)
	holders := c.yes
	if err == nil && !c.agreed {
		holders, err = r.commit(ctx, key, h.Token, c.fence, h.TTL)
	}
	if err == nil {
		if v := r.validity(h.TTL, start); v > 0 {
			r.vouch(key, h.Token, h.TTL, holders, v)
			r.settle(key, h, attempt, c)
			return engine.Grant{Token: h.Token, Fence: c.fence, Validity: v, Attempt: attempt}, nil
		}
		err = engine.ErrNotAcquired
	}
	r.undo(key, h, attempt, c)
	return engine.Grant{}, err
}

// claimed is the result of phase one.
type claimed struct {
	fence  int64
	agreed bool    // a majority of holders recorded the fence already: no commit needed
	taken  uint64  // bit i: node i answered that another token holds the key
	yes    uint64  // bit i: node i took the key for the token, or held it already
	calls  *flight // the acquires, some perhaps still in flight
}

// claim runs phase one.
func (r *Redlock) claim(ctx context.Context, key string, h engine.Hold, attempt string) (c claimed, err error) {
	t := newTally(r.quorum, len(r.nodes))
	var s claimSummary
	c.calls, err = r.fanout(ctx, r.timeout(h.TTL), &Op{Kind: OpAcquire, Key: key, Hold: h, Attempt: attempt, MetaFor: r.metaGrace()}, nil,
		func(rep Reply) bool {
			t.add(rep.Claim.State != Taken, rep.Err)
			if rep.Err == nil && rep.Claim.State == Mine && r.staleHold(rep.Tag, rep.Claim.Fence) {
				// A hold that may predate the node's floor: its fence
				// may be below fences granted before the restart, or the
				// token's grant, made by the counted nodes meanwhile
				// (TestRetryOfAGrantMadeDuringAHoldOut). The token holds
				// the key there, but its fence neither makes nor breaks
				// a majority (fence).
				s.stale = true
				s.counter = max(s.counter, rep.Claim.Counter)
				c.yes |= 1 << rep.Tag
			} else if rep.Err == nil {
				s.add(rep.Claim)
				if rep.Claim.State == Taken {
					c.taken |= 1 << rep.Tag
				} else {
					c.yes |= 1 << rep.Tag
				}
			}
			// A retry whose nodes do not yet make a majority that
			// records one fence hears the rest while they still can: a
			// majority of them agrees on its grant's fence (fence). Its
			// first majority may be nodes that record different fences,
			// or hold it on too few (a node that the grant's acquire has
			// not reached yet takes the key for the retry).
			return t.decided() && (s.mine == 0 || s.mine+t.pending() < r.quorum || majority(s.held, r.quorum) != 0)
		})
	if err == nil {
		err = t.outcome("acquire", &engine.BusyError{RetryAfter: s.busy.freeAfter(r.quorum, t.n)})
	}
	if err == nil {
		c.fence, c.agreed = s.fence(r.quorum)
	}
	return c, err
}

// undo rolls a refused attempt back, in the background, on every node
// that did not refuse it: the caller's answer does not wait for it. The
// rollback marks the attempt undone on each node where it has not landed,
// so an acquire that lands later (its call timed out, the node was paused)
// takes nothing, whatever order the node runs the two in; and it is sent
// again until each node answers.
func (r *Redlock) undo(key string, h engine.Hold, attempt string, c claimed) {
	// Only what this attempt took and nobody refreshed or extended since
	// (a RENEW may have counted the hold toward its majority): neither a
	// refused retry nor a rollback that lands late removes a hold of the
	// same token that another attempt took or refreshed.
	op := &Op{Kind: OpRelease, Key: key, Token: h.Token, Rollback: true, Attempt: attempt, Undo: attempt, UndoFor: h.TTL, MetaFor: r.metaGrace()}
	all := uint64(1)<<len(r.nodes) - 1
	r.carry(op, all&^c.taken)
	if !c.calls.landed() { // the late answers still tell the nodes' health
		r.afterward(c.calls, func(Reply) {}, func() {})
	}
}

// claimSummary gathers the phase-one replies that decide the fence.
type claimSummary struct {
	busy     heldTimes // the other holder's remaining lease on the nodes that refused
	counter  int64     // the largest counter any node reported
	mine     int       // nodes where the token already held the key
	held     []int64   // the fences recorded for the token where it held the key
	acquired int       // nodes that took the key for the token
	first    int64     // the fence the first of them recorded
	split    bool      // whether those nodes recorded different fences
	stale    bool      // a node's hold may predate its fence floor (staleHold): not in mine nor held
}

func (s *claimSummary) add(c Claim) {
	s.counter = max(s.counter, c.Counter)
	switch c.State {
	case Taken:
		s.busy = append(s.busy, c.Held)
	case Mine:
		s.mine++
		s.held = append(s.held, c.Fence)
	case Acquired:
		if s.acquired == 0 {
			s.first = c.Fence
		}
		s.split = s.split || c.Fence != s.first
		s.acquired++
	}
}

// fence picks the grant's fence. A retry that still holds a majority keeps
// the fence of its grant (no other grant can have come between): the one a
// majority of the nodes record for the token (heldFence). A node outside that
// majority may record another (the grant's first attempt landed there
// late and took the key with the node's own counter, or the node missed
// the release of an earlier grant); where no majority agrees (only a bare
// majority answered, and they differ), the largest is the fence, which is
// never below the grant's (every later grant is above it too). A majority
// that took the key and agrees has recorded the fence already. Otherwise
// the largest counter seen is the fence, to be committed.
func (s *claimSummary) fence(quorum int) (fence int64, agreed bool) {
	switch {
	case s.mine >= quorum:
		return heldFence(s.held, quorum), false
	case s.stale:
		// Too few holds the token's grant certainly made: above every
		// counter seen (a Mine answer does not raise its node's
		// counter, which may be a fence already granted).
		return s.counter + 1, false
	case s.acquired >= quorum && !s.split:
		return s.first, true
	default:
		return s.counter, false
	}
}

// heldFence is the fence that at least quorum of fences record, or the
// largest where none does (fences start at 1).
func heldFence(fences []int64, quorum int) int64 {
	if f := majority(fences, quorum); f != 0 {
		return f
	}
	return slices.Max(fences)
}

// majority is the fence that at least quorum of fences record, or 0.
func majority(fences []int64, quorum int) int64 {
	for _, f := range fences {
		n := 0
		for _, g := range fences {
			if g == f {
				n++
			}
		}
		if n >= quorum {
			return f
		}
	}
	return 0
}

// commit runs phase two. It returns the nodes where the token holds the
// key (bit i: node i). It only raises the fence a hold records, never
// lowers it, nor does settle: lockproxy cannot tell a hold its grant took
// from one that a late acquire of the same grant took after the grant's
// release (through another instance, which cannot mark the attempt
// undone) and another token's grant, with a counter above that grant's
// fence; lowering the latter could leave a majority of the token's holds
// with a fence below the other grant's, which a later LOCK … TOKEN would
// answer. So a node that took the key for a grant with a higher counter
// keeps it, and the holder's fence is the one a majority records (heldFence),
// for a retry as for LOCKINFO (holder).
func (r *Redlock) commit(ctx context.Context, key, token string, fence int64, ttl time.Duration) (uint64, error) {
	t := newTally(r.quorum, len(r.nodes))
	var yes uint64
	_, err := r.fanout(ctx, r.timeout(ttl), &Op{Kind: OpCommit, Key: key, Token: token, Fence: fence, MetaFor: r.metaGrace()}, nil,
		func(rep Reply) bool {
			t.add(rep.OK, rep.Err)
			if rep.Err == nil && rep.OK {
				yes |= 1 << rep.Tag
			}
			if rep.Err == nil && r.trust != nil {
				// Counted: the node's counter is at least the fence now,
				// held or not, which its acquire reply need not have
				// carried (a fence from another node's counter). A
				// majority of the nodes decides: every majority that
				// could grant a lower fence has one whose restart with
				// less is held out (restart.go's lost;
				// TestDurableRaisedByACommitWipedHeldOut).
				r.trust.carried(rep.Tag, fence)
			}
			return t.decided()
		})
	if err != nil {
		return 0, err
	}
	return yes, t.outcome("acquire", engine.ErrNotAcquired)
}

// Extend resets the lease of key held by token on a majority of nodes; a
// zero ttl reuses the lease the lock was last given. The validity counts
// from the shortest lease a majority applied. It reports ErrNotHeld only
// when so many nodes said so that no majority can hold the lock; answers
// that do not decide it give an engine.UnknownOutcomeError. An extension a
// majority granted heals the lock, in the background, onto the counted
// nodes where its key is free (heal.go).
func (r *Redlock) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	if err := r.checkLease(ttl); err != nil {
		return 0, err
	}
	start := time.Now()
	t := newTally(r.quorum, len(r.nodes))
	applied := time.Duration(0)
	leased := false // a node found a bound lock made a lease
	var yes uint64  // bit i: node i extended it
	w := renewal{started: start, freeBy: start.Add(freeWithin)}
	op := &Op{Kind: OpExtend, Key: key, Token: token, TTL: ttl, Mode: mode, Attempt: engine.BoundAttempt(ctx), MarkFor: r.markFor(), MetaFor: r.metaGrace()}
	calls, err := r.fanout(ctx, r.timeout(ttl), op, nil,
		func(rep Reply) bool {
			t.add(rep.TTL > 0, rep.Err)
			if rep.Err == nil && rep.TTL > 0 {
				yes |= 1 << rep.Tag
			}
			w.add(rep)
			leased = leased || rep.Err == nil && rep.TTL < 0
			if rep.TTL > 0 && (applied == 0 || rep.TTL < applied) {
				applied = rep.TTL
			}
			return t.settled()
		})
	if err == nil {
		err = t.verdict("extend", engine.ErrNotHeld)
	}
	if errors.Is(err, engine.ErrNotHeld) && leased {
		err = engine.ErrNotBound
	}
	if err != nil {
		return 0, err
	}
	if v := r.validity(applied, start); v > 0 {
		r.vouch(key, token, applied, yes, v)
		r.heal(key, token, applied, mode, &w, calls, time.Now().Add(v))
		return v, nil
	}
	return 0, engine.ErrNotHeld
}

// Release deletes key held by token on every node; it reports true when a
// majority still held it for token. It runs sent, if not nil, once the
// release is queued for every node. A node runs what is queued for it in order (one pipeline per
// node, the default), so an acquire started after sent lands behind the
// release on every node — often in the same round trip. The nodes are told
// of line, this instance's first waiters, which this instance wakes in turn
// itself: a node announces the release only when someone else waits.
//
// It reports false only when so many nodes said the token does not hold
// the key that no majority can; answers that do not decide it give an
// engine.UnknownOutcomeError, and the release is carried on, in the
// background, to every node that did not answer it, bound to the hold it
// released (carried). (After a decided
// release, a minority that missed it lets the lease expire: carrying every
// release to a slow node would bury it in retries.) Where the grant's own
// acquires may still be in flight, the release marks them undone.
func (r *Redlock) Release(ctx context.Context, key, token string, line []engine.Waiter, sent func()) (bool, error) {
	op := &Op{Kind: OpRelease, Key: key, Token: token, Line: line, Attempt: engine.BoundAttempt(ctx), MarkFor: r.markFor(), MetaFor: r.metaGrace()}
	r.unvouch(key, token)
	if p := r.pending(key, token); p.attempt != "" {
		op.Undo, op.UndoFor = p.attempt, p.ttl
	}
	t := newTally(r.quorum, len(r.nodes))
	var held []string // the attempts of the holds deleted
	calls, err := r.fanout(ctx, r.timeout(op.UndoFor), op, sent,
		func(rep Reply) bool {
			t.add(rep.OK, rep.Err)
			if rep.OK {
				held = append(held, rep.Attempt)
			}
			return t.settled()
		})
	if err == nil {
		err = t.verdict("release", engine.ErrNotHeld)
	}
	if err != nil && !errors.Is(err, engine.ErrNotHeld) {
		r.finish(calls, carried(op, held)) // undecided: a silent node may complete a majority of holders
	}
	if errors.Is(err, engine.ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
}

// carried is op as it is carried on to silent nodes: bound to the attempt
// of the hold it released where every node that deleted one names the
// same, so that a grant of the same token made meanwhile (the client
// locked again) is not deleted when the release lands late. Otherwise, or
// when no node deleted one, op as it is (a release bound to nothing
// deletes any hold of the token).
func carried(op *Op, held []string) *Op {
	if op.Attempt != "" || len(held) == 0 || held[0] == "" {
		return op
	}
	for _, a := range held[1:] {
		if a != held[0] {
			return op
		}
	}
	bound := *op
	bound.Attempt = held[0]
	return &bound
}

// heldTimes are the remaining leases of another holder on the nodes that
// refused an acquire.
type heldTimes []time.Duration

// freeAfter is how long until a majority of n nodes is free of the other
// holder, if it does not renew: the nodes not listed are free now.
func (h heldTimes) freeAfter(quorum, n int) time.Duration {
	free := n - len(h) // nodes free already (or that did not answer)
	if free >= quorum {
		return 0
	}
	slices.Sort(h)
	return h[quorum-free-1]
}

// Leave takes waiter out of key's line on every node, waiting for them
// all (each within the node timeout). A node that misses it lets the place
// expire.
func (r *Redlock) Leave(ctx context.Context, key, waiter string) error {
	t := newTally(r.quorum, len(r.nodes))
	calls, err := r.fanout(ctx, r.timeout(0), &Op{Kind: OpLeave, Key: key, Token: waiter}, nil,
		func(rep Reply) bool { t.add(rep.OK, rep.Err); return false })
	calls.Wait()
	if err != nil {
		return err
	}
	return errors.Join(t.errs...)
}
