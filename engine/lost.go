package engine

import (
	"context"

	"go.uber.org/zap"
)

// Why a lock was lost, as the holder is told (LostError.Reason, and the
// push message of a RESP3 holder).
const (
	// LostDeleted: another connection released it without its token (DEL,
	// UNLINK, EXPIRE 0) through this instance.
	LostDeleted = "deleted"
	// LostGone: a renewal found the lock no longer held by its token
	// (deleted through another instance, or expired).
	LostGone = "gone"
	// LostRenewal: renewals failed until the lock's validity ran out.
	LostRenewal = "renewal failed"
	// LostSession: the backend lost it (its ZooKeeper session expired).
	LostSession = "session expired"
	// LostClockJumped: the wall clock of a Redis node it relied on jumped,
	// and fewer than a majority of counted nodes still hold it
	// (quorum/clock.go).
	LostClockJumped = "node clock jumped"
)

// lostLock is a loss not yet reported: whose, and why. owner is nil for a
// lease whose connection is gone.
type lostLock struct {
	owner  *Owner
	reason string
}

// maxLostLeases bounds the lost leases remembered for holders that have no
// connection here to forget them with; past it, the oldest are forgotten
// all at once (their holders then get "not held" instead of LOCKLOST).
const maxLostLeases = 4096

// OnLost sets what runs when a lock o holds is lost or taken from it:
// fn gets the key and the reason (LostDeleted, ...). fn runs with the
// engine's lock held, from any goroutine: it must return at once and not
// call the engine (resp.Conn.Push queues).
func (o *Owner) OnLost(fn func(key, reason string)) {
	o.e.mu.Lock()
	defer o.e.mu.Unlock()
	o.onLost = fn
}

// TakeLost reports once, with its error, that a lock o held on key was
// lost: a command of o's connection about key gets it. nil when none was.
func (o *Owner) TakeLost(key string) error {
	e := o.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, reason := range o.lost {
		if id.key == key {
			delete(o.lost, id)
			delete(e.lost, id)
			return &LostError{Reason: reason}
		}
	}
	return nil
}

// forgetLostLocked drops o's unreported losses of key: o was granted key
// again; e.mu is held.
func (o *Owner) forgetLostLocked(key string) {
	if o == nil {
		return
	}
	e := o.e
	for id := range o.lost {
		if id.key == key {
			delete(o.lost, id)
			delete(e.lost, id)
		}
	}
}

// holderLocked is the connection that took key with token through this
// instance, bound or lease, or nil, and whether a legacy command took it;
// e.mu is held.
func (e *Engine) holderLocked(key, token string) (*Owner, bool) {
	if b := e.bound[key]; b != nil && b.token == token {
		return b.owner, b.legacy
	}
	if r := e.leases[key]; r != nil && r.token == token && r.owner != nil {
		return r.owner, r.legacy
	}
	return nil, false
}

// Take releases key held by token for a client that did not present the
// token (DEL, UNLINK, EXPIRE 0): from the connection by. If another
// connection took the lock through this instance with LOCK, the lock was
// taken from it: it is told at once (OnLost) and its next command about
// key, or a RENEW or UNLOCK with the token, gets a LostError. A lock a
// legacy command took is released as Redis would, silently (Hold.Legacy).
func (e *Engine) Take(ctx context.Context, by *Owner, key, token string) (bool, error) {
	e.mu.Lock()
	holder, legacy := e.holderLocked(key, token)
	e.mu.Unlock()
	if legacy {
		return e.Unlock(ctx, key, token)
	}
	e.unwatch(key, token)
	ok, err := e.free(context.WithValue(ctx, takingKey{}, true), key, token)
	switch {
	case ok && holder != nil && holder != by:
		e.mu.Lock()
		e.loseLocked(holder, key, token, LostDeleted, nil)
		e.mu.Unlock()
	case ok && holder == nil && e.cfg.AnnounceTaken != nil:
		go e.cfg.AnnounceTaken(key, token) // granted elsewhere, perhaps
	}
	return ok, err
}

type takingKey struct{}

// Taking reports whether a Backend.Release called with ctx takes the lock
// from its holder (Take: a DEL without the token) rather than the holder
// releasing it. A backend that cannot announce Take's loss otherwise
// (ZooKeeper) leaves a mark with the release, for the instance that
// granted the lock to find (Taken).
func Taking(ctx context.Context) bool {
	taking, _ := ctx.Value(takingKey{}).(bool)
	return taking
}

// Taken says that token's lock on key was taken from its holder through
// another instance (a DEL there, announced by its AnnounceTaken). If this
// instance granted it and its holder is connected, the holder is told as
// Take tells it; otherwise nothing happens (the echo of an announcement
// made here, or a lock granted elsewhere).
func (e *Engine) Taken(key, token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o, legacy := e.holderLocked(key, token)
	if o == nil || legacy {
		return
	}
	if b := e.bound[key]; b != nil && b.token == token {
		e.dropLocked(b)
	}
	e.dropLeaseLocked(key, token)
	e.loseLocked(o, key, token, LostDeleted, nil)
}

// loseLocked records that o's lock on key with token was lost for reason,
// counts and logs it and tells o; e.mu is held. A nil o is a lease whose
// holder has no connection here: its next RENEW or UNLOCK hears of it.
func (e *Engine) loseLocked(o *Owner, key, token, reason string, err error) {
	e.stats.Lost.Add(1)
	id := lockID{key, token}
	if old, ok := e.lost[id]; ok && old.owner == nil {
		e.lostLeases--
	}
	var client uint64
	if o == nil {
		if e.lostLeases >= maxLostLeases {
			for id, l := range e.lost {
				if l.owner == nil {
					delete(e.lost, id)
				}
			}
			e.lostLeases = 0
		}
		e.lostLeases++
	} else {
		client = o.id
		o.lost[id] = reason
		if o.onLost != nil {
			o.onLost(key, reason)
		}
	}
	e.lost[id] = lostLock{owner: o, reason: reason}
	e.log.Error("lock lost: its holder is told (a RESP3 push, and LOCKLOST on its next command about the key)",
		zap.String("key", key), zap.String("reason", reason), zap.Uint64("client", client), zap.Error(err))
}

// takeLost reports once that key's lock for token was lost.
func (e *Engine) takeLost(key, token string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.takeLostLocked(key, token)
}

// takeLostLocked is takeLost with e.mu held.
func (e *Engine) takeLostLocked(key, token string) error {
	id := lockID{key, token}
	l, ok := e.lost[id]
	if !ok {
		return nil
	}
	delete(e.lost, id)
	if l.owner != nil {
		delete(l.owner.lost, id)
	} else {
		e.lostLeases--
	}
	return &LostError{Reason: l.reason}
}

// Lost records that token's lock on key, granted through this instance,
// was lost behind its holder's back (Events): a connection-bound lock
// stops being renewed, and its holder is told as Take tells it.
func (e *Engine) Lost(key, token string) { e.LostFor(key, token, LostSession) }

// LostFor is Lost for a reason of the backend's own (a Redis node's clock
// jumped: LostClockJumped). A backend finds it by type assertion.
func (e *Engine) LostFor(key, token, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.lost[lockID{key, token}]; ok {
		return // lost already (a renewal failed first), its holder told
	}
	o, _ := e.holderLocked(key, token)
	if b := e.bound[key]; b != nil && b.token == token {
		e.dropLocked(b)
	}
	e.dropLeaseLocked(key, token)
	e.loseLocked(o, key, token, reason, nil)
}
