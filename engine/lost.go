package engine

import "context"

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
	for _, l := range o.lost {
		if l.key == key {
			e.toldLocked(l)
			return &LostError{Reason: l.reason}
		}
	}
	return nil
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
	e.forget(key, token, Bound)
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
	if o, legacy := e.holderLocked(key, token); o != nil && !legacy {
		e.loseHeldLocked(e.locks[key], LostDeleted, nil)
	}
}

// takeLost reports once that key's lock for token was lost.
func (e *Engine) takeLost(key, token string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.takeLostLocked(e.locks[key], token)
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
	if e.locks[key].lostOf(token) != nil {
		return // lost already (a renewal failed first), its holder told
	}
	if r := e.heldLocked(key, token); r != nil {
		e.loseHeldLocked(r, reason, nil)
		return
	}
	e.loseLocked(nil, key, token, reason, nil)
}
