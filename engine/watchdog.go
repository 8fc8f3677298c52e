package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// bound is a connection-bound lock kept alive by the watchdog. Its timer
// renews it every RenewEvery; no goroutine waits between renewals.
type bound struct {
	key, token string
	owner      *Owner
	timer      *time.Timer
	validUntil time.Time // when the last successful renewal's validity ends
}

// watch starts renewing key for o, replacing any lock this instance kept
// for key before (one holder per key). It refuses once the engine is
// shutting down, whose release of bound locks may have run already.
func (e *Engine) watch(o *Owner, key, token string, validity time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return false
	}
	if old := e.bound[key]; old != nil {
		if old.token == token {
			old.validUntil = time.Now().Add(validity)
			return true
		}
		e.dropLocked(old)
	}
	b := &bound{key: key, token: token, owner: o, validUntil: time.Now().Add(validity)}
	b.timer = time.AfterFunc(e.cfg.RenewEvery, func() { e.renew(b) })
	e.bound[key] = b
	o.locks[key] = b
	return true
}

// unwatch stops renewing key if token is the lock this instance keeps.
func (e *Engine) unwatch(key, token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.bound[key]; b != nil && b.token == token {
		e.dropLocked(b)
	}
}

// dropLocked forgets b; e.mu is held.
func (e *Engine) dropLocked(b *bound) {
	b.timer.Stop()
	delete(e.bound, b.key)
	if b.owner.locks[b.key] == b {
		delete(b.owner.locks, b.key)
	}
}

// current reports whether b is still the lock kept for its key.
func (e *Engine) current(b *bound) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bound[b.key] == b
}

// renew runs on b's timer: it extends the lease and re-arms, or, when the
// lock is gone or its validity ran out without a renewal, declares it lost.
func (e *Engine) renew(b *bound) {
	if !e.current(b) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(e.cfg.OpTimeout, e.cfg.RenewEvery))
	defer cancel()
	v, err := e.backend.Extend(ctx, b.key, b.token, e.cfg.BoundLease, Bound)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bound[b.key] != b {
		return // released or replaced while the renewal ran
	}
	switch {
	case err == nil:
		e.stats.Renewals.Add(1)
		b.validUntil = time.Now().Add(v)
		b.timer.Reset(e.cfg.RenewEvery)
	case errors.Is(err, ErrNotBound): // EXPIRE made it a lease, maybe through another instance
		e.log.Info("connection-bound lock became a lease; no longer renewed", zap.String("key", b.key))
		e.dropLocked(b)
	case !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLost) && time.Until(b.validUntil) > e.cfg.RenewEvery/3:
		e.stats.RenewFailures.Add(1)
		e.log.Warn("renewal failed; retrying while the lease lasts", zap.String("key", b.key), zap.Error(err))
		b.timer.Reset(e.cfg.RenewEvery / 3)
	default:
		e.loseLocked(b, err)
	}
}

// loseLocked records that b was lost; e.mu is held.
func (e *Engine) loseLocked(b *bound, err error) {
	e.stats.RenewFailures.Add(1)
	e.stats.Lost.Add(1)
	e.log.Error("connection-bound lock lost: renewal failed; its holder learns it on its next RENEW or UNLOCK",
		zap.String("key", b.key), zap.Uint64("client", b.owner.id), zap.Error(err))
	e.dropLocked(b)
	id := lockID{b.key, b.token}
	e.lost[id] = b.owner
	b.owner.lost[id] = struct{}{}
}

// takeLost reports once that key's lock for token was lost.
func (e *Engine) takeLost(key, token string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	id := lockID{key, token}
	o, ok := e.lost[id]
	if ok {
		delete(e.lost, id)
		if o != nil {
			delete(o.lost, id)
		} else {
			e.lostLeases--
		}
	}
	return ok
}

// maxLostLeases bounds the lost leases remembered for holders that have no
// connection here to forget them with; past it, the oldest are forgotten
// all at once (their holders then get "not held" instead of LOCKLOST).
const maxLostLeases = 4096

// Lost records that token's lock on key, granted through this instance,
// was lost behind its holder's back (Events): a connection-bound lock
// stops being renewed, and the holder's next RENEW or UNLOCK of it gets
// ErrLost.
func (e *Engine) Lost(key, token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.Lost.Add(1)
	e.log.Error("lock lost: the backend reports it gone; its holder learns it on its next RENEW or UNLOCK",
		zap.String("key", key))
	id := lockID{key, token}
	if b := e.bound[key]; b != nil && b.token == token {
		e.dropLocked(b)
		e.lost[id] = b.owner
		b.owner.lost[id] = struct{}{}
		return
	}
	if e.lostLeases >= maxLostLeases {
		for id, o := range e.lost {
			if o == nil {
				delete(e.lost, id)
			}
		}
		e.lostLeases = 0
	}
	e.lost[id] = nil
	e.lostLeases++
}

// Owner is one client connection's stake in the engine: the
// connection-bound locks it holds.
type Owner struct {
	e    *Engine
	id   uint64
	once sync.Once
	// locks and lost are guarded by e.mu.
	locks map[string]*bound
	lost  map[lockID]struct{}
}

// NewOwner returns the owner for the client connection with the given id.
func (e *Engine) NewOwner(id uint64) *Owner {
	return &Owner{e: e, id: id, locks: map[string]*bound{}, lost: map[lockID]struct{}{}}
}

// Close releases every connection-bound lock o holds; it runs once, when
// the connection closes, however it closed.
func (o *Owner) Close(ctx context.Context) error {
	var err error
	o.once.Do(func() {
		e := o.e
		e.mu.Lock()
		locks := make([]*bound, 0, len(o.locks))
		for _, b := range o.locks {
			locks = append(locks, b)
		}
		for id := range o.lost {
			delete(e.lost, id)
		}
		e.mu.Unlock()
		err = e.releaseAll(ctx, locks)
	})
	return err
}
