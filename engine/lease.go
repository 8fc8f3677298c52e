package engine

import "time"

// lease is a lease granted (or renewed) through this instance: the one
// record both LOCKPROXY LOCKS (listing.go) and lost-lock notices
// (lost.go) read. It lives in Engine.leases until it is released or
// runs out, whether or not the connection that took it is still open; while
// that connection is open, owner is it and the lease is on the owner's list
// too, so that the connection can be told when the lease is taken from it.
type lease struct {
	key, token string
	until      time.Time // when its last known validity ends
	legacy     bool      // Hold.Legacy
	// owner is the connection that took it, nil once that connection
	// closed (or when it took too many to be remembered: maxLeasesPerOwner).
	owner *Owner
	// prev and next link the leases of owner (Owner.leases): no map per
	// connection, and no second map write per grant.
	prev, next *lease
}

// maxLeasesPerOwner bounds the leases one connection is remembered to have
// taken, so that it can be told when one is taken from it. When it is
// reached, the leases that have run out are forgotten; if none has, a new
// lease is not remembered for it (its holder is not told of a DEL).
const maxLeasesPerOwner = 1024

// minLeaseSweep is the fewest remembered leases at which recordLease
// drops the expired ones.
const minLeaseSweep = 64

// ownerLeases is the list of the leases one connection took.
type ownerLeases struct {
	head *lease
	n    int
}

func (l *ownerLeases) add(r *lease) {
	r.prev, r.next = nil, l.head
	if l.head != nil {
		l.head.prev = r
	}
	l.head = r
	l.n++
}

func (l *ownerLeases) remove(r *lease) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		l.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	}
	r.prev, r.next = nil, nil
	l.n--
}

// recordLeaseLocked remembers that o (nil: no connection to tell) took,
// or renewed, the lease on key with token, valid for validity; e.mu is
// held. A record of the same token keeps its owner when o is nil (a
// renewal from any connection); a record of another token is replaced.
// Expired records are dropped whenever the map has doubled since the last
// sweep, so it stays within twice the live ones.
func (e *Engine) recordLeaseLocked(o *Owner, key, token string, legacy bool, validity time.Duration) {
	now := time.Now()
	r := e.leases[key]
	if r != nil && r.token == token && (o == nil || o == r.owner) {
		r.until = now.Add(validity)
		return
	}
	if r != nil {
		e.unownLocked(r) // another token's: its record is reused
	} else {
		r = e.newLeaseLocked()
		e.leases[key] = r
	}
	*r = lease{key: key, token: token, until: now.Add(validity), legacy: legacy}
	if o != nil && e.roomFor(o, now) {
		r.owner = o
		o.leases.add(r)
	}
	if len(e.leases) >= e.leaseSweepAt {
		e.sweepLeasesLocked(now)
	}
}

// roomFor reports whether o may be remembered to hold one more lease,
// forgetting its expired ones when it is at maxLeasesPerOwner; e.mu is held.
func (e *Engine) roomFor(o *Owner, now time.Time) bool {
	if o.leases.n < maxLeasesPerOwner {
		return true
	}
	for r := o.leases.head; r != nil; {
		next := r.next
		if now.After(r.until) {
			e.forgetLeaseLocked(r)
		}
		r = next
	}
	return o.leases.n < maxLeasesPerOwner
}

// sweepLeasesLocked drops the leases that have run out; e.mu is held.
func (e *Engine) sweepLeasesLocked(now time.Time) {
	for _, r := range e.leases {
		if now.After(r.until) {
			e.forgetLeaseLocked(r)
		}
	}
	e.leaseSweepAt = max(minLeaseSweep, 2*len(e.leases))
}

// unownLocked takes r off its owner's list; e.mu is held.
func (e *Engine) unownLocked(r *lease) {
	if r.owner != nil {
		r.owner.leases.remove(r)
		r.owner = nil
	}
}

// forgetLeaseLocked forgets r entirely and keeps the record for reuse;
// e.mu is held.
func (e *Engine) forgetLeaseLocked(r *lease) {
	e.unownLocked(r)
	if e.leases[r.key] != r {
		return
	}
	delete(e.leases, r.key)
	if len(e.spareLeases) < maxSpareLeases {
		*r = lease{}
		e.spareLeases = append(e.spareLeases, r)
	}
}

// maxSpareLeases bounds the records of forgotten leases kept for reuse.
const maxSpareLeases = 256

// newLeaseLocked is a record for a new lease: a spare one if any, so that
// a cycle of LOCK and UNLOCK allocates none; e.mu is held.
func (e *Engine) newLeaseLocked() *lease {
	if n := len(e.spareLeases); n > 0 {
		r := e.spareLeases[n-1]
		e.spareLeases = e.spareLeases[:n-1]
		return r
	}
	return &lease{}
}

// dropLease forgets the lease on key if token is the one remembered.
func (e *Engine) dropLease(key, token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropLeaseLocked(key, token)
}

// dropLeaseLocked is dropLease with e.mu held; it returns the connection
// that took the lease it forgot (nil if none, or if it is closed).
func (e *Engine) dropLeaseLocked(key, token string) *Owner {
	r := e.leases[key]
	if r == nil || r.token != token {
		return nil
	}
	o := r.owner
	e.forgetLeaseLocked(r)
	return o
}

// isLease reports whether this instance remembers token's lease on key.
func (e *Engine) isLease(key, token string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.leases[key]
	return r != nil && r.token == token
}

// disownLeasesLocked forgets that o, whose connection closes, took its
// leases; they stay listed until they end. e.mu is held.
func (e *Engine) disownLeasesLocked(o *Owner) {
	for o.leases.head != nil {
		e.unownLocked(o.leases.head)
	}
}

// grantLease records the lease on key that Lock granted o for h, in one
// step: an old loss of the token, or of o's hold on key, is moot now, and
// a bound lock this instance kept for the token is a lease now.
func (e *Engine) grantLease(o *Owner, key string, h Hold, validity time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.takeLostLocked(key, h.Token)
	o.forgetLostLocked(key)
	e.unwatchLocked(key, h.Token)
	e.recordLeaseLocked(o, key, h.Token, h.Legacy, validity)
}

// renewed records that token's lock on key was extended for validity
// (mode as asked of Extend). A bound lock made a lease stops being renewed
// and is remembered as a lease of the connection that took it; a lease
// this instance remembers lasts until its new validity ends.
func (e *Engine) renewed(key, token string, mode Mode, validity time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if mode == Lease {
		if b := e.unwatchLocked(key, token); b != nil {
			e.recordLeaseLocked(b.owner, key, token, b.legacy, validity) // its connection still took it
			return
		}
		e.recordLeaseLocked(nil, key, token, false, validity)
		return
	}
	if r := e.leases[key]; r != nil && r.token == token {
		r.until = time.Now().Add(validity)
	}
}

// unlocking is what UNLOCK does before the release: it reports, once, that
// token's lock on key was lost (the release is not sent then), and stops
// renewing it.
func (e *Engine) unlocking(key, token string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.takeLostLocked(key, token); err != nil {
		return err
	}
	e.unwatchLocked(key, token)
	return nil
}
