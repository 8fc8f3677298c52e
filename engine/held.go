package engine

import (
	"slices"
	"time"

	"go.uber.org/zap"
)

// record is all this instance knows of one key, its one entry in
// Engine.locks that every reader uses: the lock granted on the key through
// this instance (bound or lease), the losses of the key's holders that
// they have not heard of yet, the clients waiting for it here, and the
// token of its last release here. A grant writes it in place: only a key's
// first record is a map write.
type record struct {
	key string
	held
	gen   uint64      // counts the changes of held, so that a renewal that ran across one is dropped
	timer *time.Timer // renews a bound lock (watchdog.go); made at the key's first bound grant
	// prev and next link the locks of held.owner (Owner.held).
	prev, next *record
	lost       []*loss // losses on key not yet reported
	waiting    queue   // clients waiting for key here, first come first (waiting.go)
	echo       string  // the token of the last release of key through this instance
}

// held is the lock granted on a key through this instance; token is ""
// when there is none.
type held struct {
	token   string
	attempt string // the backend's attempt of the grant (Grant.Attempt)
	mode    Mode
	legacy  bool // Hold.Legacy
	// owner is the connection that took it, to be told when it is taken
	// from it; nil for a lease whose connection closed.
	owner *Owner
	until time.Time // when its last known validity ends
}

// ref names a bound lock to release after e.mu is let go.
type ref struct{ key, token, attempt string }

// minSweep is the fewest records at which a new one first drops those
// that hold nothing any more (sweepLocked), and the most of those kept
// for reuse, so that locking a new key each time allocates no record.
const minSweep = 1024

// recordLocked is key's record, made if it has none; e.mu is held. Before
// the map grows past twice what the last sweep kept, the records that
// hold nothing are dropped, so it stays within twice the live ones.
func (e *Engine) recordLocked(key string) *record {
	if r := e.locks[key]; r != nil {
		return r
	}
	if len(e.locks) >= e.sweepAt {
		e.sweepLocked(time.Now())
	}
	var r *record
	if n := len(e.spare); n > 0 {
		r, e.spare = e.spare[n-1], e.spare[:n-1]
	} else {
		r = &record{}
	}
	r.key = key
	e.locks[key] = r
	return r
}

// sweepLocked forgets the leases that ran out and the records left with
// nothing to hold, report or wake (a release's echo goes with them); e.mu
// is held.
func (e *Engine) sweepLocked(now time.Time) {
	for k, r := range e.locks {
		if r.mode == Lease && now.After(r.until) {
			e.dropLocked(r)
		}
		if r.token == "" && len(r.lost) == 0 && len(r.waiting) == 0 {
			delete(e.locks, k)
			if len(e.spare) < minSweep {
				*r = record{timer: r.timer, gen: r.gen + 1} // a renewal still on its way is dropped
				e.spare = append(e.spare, r)
			}
		}
	}
	e.sweepAt = max(minSweep, 2*len(e.locks))
}

// heldLocked is key's record if token holds the lock granted on it here,
// else nil; e.mu is held.
func (e *Engine) heldLocked(key, token string) *record {
	if r := e.locks[key]; r.holds(token) {
		return r
	}
	return nil
}

// holds reports whether token holds the lock granted here on r's key (r
// may be nil).
func (r *record) holds(token string) bool { return r != nil && r.token != "" && r.token == token }

// holdLocked makes h the lock held on r's key; e.mu is held. A bound lock
// of another token that it replaces is gone from the store, which granted
// the key again: its holder is told, as the watchdog would have told it.
func (e *Engine) holdLocked(r *record, h held) {
	if h.token != "" && r.token != "" && r.token != h.token && r.mode == Bound {
		e.loseHeldLocked(r, LostGone, nil)
	}
	r.setOwner(h.owner)
	if r.mode == Bound {
		e.bound--
		r.timer.Stop()
	}
	if h.mode == Bound {
		e.bound++
		e.armLocked(r)
	}
	r.held = h
	r.gen++
}

// dropLocked forgets the lock held on r's key; e.mu is held.
func (e *Engine) dropLocked(r *record) { e.holdLocked(r, held{}) }

// setOwner moves r to o's list of locks (none when o is nil); e.mu is held.
func (r *record) setOwner(o *Owner) {
	if r.owner == o {
		return
	}
	if old := r.owner; old != nil {
		if r.prev != nil {
			r.prev.next = r.next
		} else {
			old.held = r.next
		}
		if r.next != nil {
			r.next.prev = r.prev
		}
		r.prev, r.next = nil, nil
	}
	r.owner = o
	if o != nil {
		r.next = o.held
		if o.held != nil {
			o.held.prev = r
		}
		o.held = r
	}
}

// granted records the lock on key that Lock granted o as g for h, in one
// step: an old loss of the token, or of o's hold on key, is moot now, and
// a lock this instance kept for the token takes the new grant's shape. It
// refuses a bound lock once the engine is shutting down, whose release of
// bound locks may have run already.
func (e *Engine) granted(o *Owner, key string, h Hold, g Grant) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.recordLocked(key)
	e.forgetLostLocked(r, o, h.Token)
	if h.Mode == Bound && e.closing {
		return false
	}
	e.holdLocked(r, held{token: h.Token, attempt: g.Attempt, mode: h.Mode, legacy: h.Legacy, owner: o, until: time.Now().Add(g.Validity)})
	return true
}

// renewed records that token's lock on key was extended for validity
// (mode as asked of Extend). A bound lock made a lease stops being renewed
// and stays the lease of the connection that took it; a lease granted
// elsewhere is remembered with no connection to tell.
func (e *Engine) renewed(key, token string, mode Mode, validity time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	until := time.Now().Add(validity)
	r := e.heldLocked(key, token)
	switch {
	case mode == Lease && r != nil:
		e.holdLocked(r, held{token: token, attempt: r.attempt, mode: Lease, legacy: r.legacy, owner: r.owner, until: until})
	case mode == Lease:
		e.holdLocked(e.recordLocked(key), held{token: token, mode: Lease, until: until})
	case r != nil:
		r.until = until
	}
}

// forget forgets token's lock on key if it is held here in mode: a bound
// lock is no longer renewed, a lease no longer listed.
func (e *Engine) forget(key, token string, mode Mode) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.locks[key]; r.holds(token) && r.mode == mode {
		e.dropLocked(r)
	}
}

// unlocking is what UNLOCK does before the release: it reports, once, that
// token's lock on key was lost (the release is not sent then), and stops
// renewing it.
func (e *Engine) unlocking(key, token string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.locks[key]
	if err := e.takeLostLocked(r, token); err != nil {
		return err
	}
	if r.holds(token) && r.mode == Bound {
		e.dropLocked(r)
	}
	return nil
}

// loss is a lost lock whose holder has not heard of it yet, on its key's
// record and its owner's list. owner is nil for a lease whose connection
// is gone.
type loss struct {
	key, token, reason string
	owner              *Owner
}

// maxLostLeases bounds the lost leases remembered for holders that have no
// connection here to forget them with; past it, the oldest are forgotten
// all at once (their holders then get "not held" instead of LOCKLOST).
const maxLostLeases = 4096

// forgetLostLocked drops the losses on r's key of token, and of o, which
// were granted it again; e.mu is held.
func (e *Engine) forgetLostLocked(r *record, o *Owner, token string) {
	for i := 0; i < len(r.lost); {
		if l := r.lost[i]; l.token == token || o != nil && l.owner == o {
			e.toldLocked(l)
		} else {
			i++
		}
	}
}

// toldLocked forgets l: its holder heard of it, or it is moot; e.mu is held.
func (e *Engine) toldLocked(l *loss) {
	is := func(x *loss) bool { return x == l }
	r := e.locks[l.key]
	r.lost = slices.DeleteFunc(r.lost, is)
	if l.owner != nil {
		l.owner.lost = slices.DeleteFunc(l.owner.lost, is)
	} else {
		e.lostLeases--
	}
}

// holderLocked is the connection that took key with token through this
// instance, bound or lease, or nil, and whether a legacy command took it;
// e.mu is held.
func (e *Engine) holderLocked(key, token string) (*Owner, bool) {
	if r := e.heldLocked(key, token); r != nil && r.owner != nil {
		return r.owner, r.legacy
	}
	return nil, false
}

// loseHeldLocked forgets the lock held on r's key, which was lost for
// reason, and tells its holder (loseLocked); e.mu is held.
func (e *Engine) loseHeldLocked(r *record, reason string, err error) {
	o, token := r.owner, r.token
	e.dropLocked(r)
	e.loseLocked(o, r.key, token, reason, err)
}

// loseLocked records that o's lock on key with token was lost for reason,
// counts and logs it and tells o; e.mu is held. A nil o is a lease whose
// holder has no connection here: its next RENEW or UNLOCK hears of it.
func (e *Engine) loseLocked(o *Owner, key, token, reason string, err error) {
	e.stats.Lost.Add(1)
	r := e.recordLocked(key)
	if old := r.lostOf(token); old != nil {
		e.toldLocked(old)
	}
	l := &loss{key: key, token: token, reason: reason, owner: o}
	var client uint64
	if o == nil {
		if e.lostLeases >= maxLostLeases {
			e.forgetLostLeasesLocked()
		}
		e.lostLeases++
	} else {
		client = o.id
		o.lost = append(o.lost, l)
		if o.onLost != nil {
			o.onLost(key, reason)
		}
	}
	r.lost = append(r.lost, l)
	e.log.Error("lock lost: its holder is told (a RESP3 push, and LOCKLOST on its next command about the key)",
		zap.String("key", key), zap.String("reason", reason), zap.Uint64("client", client), zap.Error(err))
}

// forgetLostLeasesLocked forgets every loss with no connection to forget
// it with; e.mu is held.
func (e *Engine) forgetLostLeasesLocked() {
	for _, r := range e.locks {
		r.lost = slices.DeleteFunc(r.lost, func(l *loss) bool { return l.owner == nil })
	}
	e.lostLeases = 0
}

// lostOf is the loss of token on r's key not yet reported, or nil (r may
// be nil).
func (r *record) lostOf(token string) *loss {
	if r == nil {
		return nil
	}
	for _, l := range r.lost {
		if l.token == token {
			return l
		}
	}
	return nil
}

// takeLostLocked is takeLost on key's record r (nil: none) with e.mu held.
func (e *Engine) takeLostLocked(r *record, token string) error {
	l := r.lostOf(token)
	if l == nil {
		return nil
	}
	e.toldLocked(l)
	return &LostError{Reason: l.reason}
}
