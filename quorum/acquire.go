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
// majority of holders. Otherwise (the counters had drifted apart, or this
// is a retry by the holder) phase two commits the fence to every node: it
// raises each counter to it and succeeds only where the token still holds
// the key. The grant needs a quorum in each phase it runs and a positive
// validity; otherwise every node is rolled back. README.md ("Fencing
// tokens") explains why the fence strictly increases.
func (r *Redlock) Acquire(ctx context.Context, key string, h engine.Hold) (engine.Grant, error) {
	start := time.Now()
	attempt := ""
	if h.Fresh {
		attempt = engine.NewToken()
	}
	fence, agreed, claimed, err := r.claim(ctx, key, h, attempt)
	if err == nil && !agreed {
		err = r.commit(ctx, key, h.Token, fence)
	}
	if err == nil {
		if v := r.validity(h.TTL, start); v > 0 {
			r.settle(key, h.Token, claimed)
			return engine.Grant{Token: h.Token, Fence: fence, Validity: v}, nil
		}
		err = engine.ErrNotAcquired
	}
	claimed.Wait() // an acquire still in flight must not land after the rollback
	r.rollback(ctx, key, h.Token, attempt)
	return engine.Grant{}, err
}

// claim runs phase one. It returns the fence, whether a majority of
// holders recorded it already (agreed: no commit needed), and the flight of
// its calls.
func (r *Redlock) claim(ctx context.Context, key string, h engine.Hold, attempt string) (fence int64, agreed bool, calls *flight, err error) {
	t := newTally(r.quorum, len(r.nodes))
	var s claimSummary
	calls, err = fanout(ctx, r.nodes, r.cfg.NodeTimeout, &Op{Kind: OpAcquire, Key: key, Hold: h, Attempt: attempt},
		func(rep Reply) bool {
			t.add(rep.Claim.State != Taken, rep.Err)
			if rep.Err == nil {
				s.add(rep.Claim)
			}
			return t.decided()
		})
	if err == nil {
		err = t.outcome("acquire", &engine.BusyError{RetryAfter: s.busy.freeAfter(r.quorum, t.n)})
	}
	if err != nil {
		return 0, false, calls, err
	}
	fence, agreed = s.fence(r.quorum)
	return fence, agreed, calls, nil
}

// claimSummary gathers the phase-one replies that decide the fence.
type claimSummary struct {
	busy     heldTimes // the other holder's remaining lease on the nodes that refused
	counter  int64     // the largest counter any node reported
	mine     int       // nodes where the token already held the key
	held     int64     // the largest fence recorded for the token where it held the key
	acquired int       // nodes that took the key for the token
	first    int64     // the fence the first of them recorded
	split    bool      // whether those nodes recorded different fences
}

func (s *claimSummary) add(c Claim) {
	s.counter = max(s.counter, c.Counter)
	switch c.State {
	case Taken:
		s.busy = append(s.busy, c.Held)
	case Mine:
		s.mine++
		s.held = max(s.held, c.Fence)
	case Acquired:
		if s.acquired == 0 {
			s.first = c.Fence
		}
		s.split = s.split || c.Fence != s.first
		s.acquired++
	}
}

// fence picks the grant's fence. A retry that still holds a majority keeps
// the fence of its grant (no other grant can have come between). A
// majority that took the key and agrees has recorded the fence already.
// Otherwise the largest counter seen is the fence, to be committed.
func (s *claimSummary) fence(quorum int) (fence int64, agreed bool) {
	switch {
	case s.mine >= quorum:
		return s.held, false // the commit records it where the key was taken anew
	case s.acquired >= quorum && !s.split:
		return s.first, true
	default:
		return s.counter, false
	}
}

// commit runs phase two.
func (r *Redlock) commit(ctx context.Context, key, token string, fence int64) error {
	_, err := r.count(ctx, &Op{Kind: OpCommit, Key: key, Token: token, Fence: fence}, "acquire", engine.ErrNotAcquired)
	return err
}

// count fans op out, counts the nodes whose reply is OK, and turns the
// count into op's outcome (see tally.outcome).
func (r *Redlock) count(ctx context.Context, op *Op, name string, no error) (*flight, error) {
	return r.countThen(ctx, op, nil, name, no)
}

// countThen is count that runs sent once op is on its way to every node.
func (r *Redlock) countThen(ctx context.Context, op *Op, sent func(), name string, no error) (*flight, error) {
	t := newTally(r.quorum, len(r.nodes))
	calls, err := fanoutThen(ctx, r.nodes, r.cfg.NodeTimeout, op, sent,
		func(rep Reply) bool { t.add(rep.OK, rep.Err); return t.decided() })
	if err != nil {
		return calls, err
	}
	return calls, t.outcome(name, no)
}

// rollback releases token's key on every node, waiting for all of them;
// for a fresh acquire, only where attempt took it.
func (r *Redlock) rollback(ctx context.Context, key, token, attempt string) {
	ctx, cancel := r.cleanup(ctx)
	defer cancel()
	calls, _ := fanout(ctx, r.nodes, r.cfg.NodeTimeout, &Op{Kind: OpRelease, Key: key, Token: token, Rollback: true, Attempt: attempt},
		func(Reply) bool { return false })
	calls.Wait()
}

// Extend resets the lease of key held by token on a majority of nodes; a
// zero ttl reuses the lease the lock was last given. The validity counts
// from the shortest lease a majority applied.
func (r *Redlock) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	start := time.Now()
	t := newTally(r.quorum, len(r.nodes))
	applied := time.Duration(0)
	leased := false // a node found a bound lock made a lease
	_, err := fanout(ctx, r.nodes, r.cfg.NodeTimeout, &Op{Kind: OpExtend, Key: key, Token: token, TTL: ttl, Mode: mode},
		func(rep Reply) bool {
			t.add(rep.TTL > 0, rep.Err)
			leased = leased || rep.Err == nil && rep.TTL < 0
			if rep.TTL > 0 && (applied == 0 || rep.TTL < applied) {
				applied = rep.TTL
			}
			return t.decided()
		})
	if err == nil {
		err = t.outcome("extend", engine.ErrNotHeld)
	}
	if errors.Is(err, engine.ErrNotHeld) && leased {
		err = engine.ErrNotBound
	}
	if err != nil {
		return 0, err
	}
	if v := r.validity(applied, start); v > 0 {
		return v, nil
	}
	return 0, engine.ErrNotHeld
}

// Release deletes key held by token on every node; it reports true when a
// majority still held it for token.
func (r *Redlock) Release(ctx context.Context, key, token string) (bool, error) {
	return r.ReleaseThen(ctx, key, token, nil, nil)
}

var _ engine.EarlyReleaser = (*Redlock)(nil)

// ReleaseThen is Release that runs sent once the release is queued for
// every node. A node runs what is queued for it in order (one pipeline per
// node, the default), so an acquire started after sent lands behind the
// release on every node — often in the same round trip. The nodes are told
// of line's first waiter, which this instance wakes itself.
func (r *Redlock) ReleaseThen(ctx context.Context, key, token string, line []engine.Waiter, sent func()) (bool, error) {
	r.landed(key, token)
	next := ""
	if len(line) > 0 {
		next = line[0].ID
	}
	_, err := r.countThen(ctx, &Op{Kind: OpRelease, Key: key, Token: token, Next: next}, sent, "release", engine.ErrNotHeld)
	if errors.Is(err, engine.ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
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
	calls, err := fanout(ctx, r.nodes, r.cfg.NodeTimeout, &Op{Kind: OpLeave, Key: key, Token: waiter},
		func(rep Reply) bool { t.add(rep.OK, rep.Err); return false })
	calls.Wait()
	if err != nil {
		return err
	}
	return errors.Join(t.errs...)
}
