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
	attempt    string // the backend's attempt of the last grant (Grant.Attempt)
	owner      *Owner
	legacy     bool // Hold.Legacy
	timer      *time.Timer
	validUntil time.Time // when the last successful renewal's validity ends
}

// watch starts renewing key, granted to o as g for h, replacing any lock
// this instance kept for key before (one holder per key). A grant of the
// token that holds it already (a retry, maybe on another connection) makes
// o its owner: a connection-bound lock belongs to the connection granted
// last, and only o's close releases it. It refuses once the engine is
// shutting down, whose release of bound locks may have run already.
func (e *Engine) watch(o *Owner, key string, h Hold, g Grant) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.takeLostLocked(key, h.Token) // a new grant: an old loss of this token is moot
	o.forgetLostLocked(key)            // nor does o's old loss of key matter any more
	if e.closing {
		return false
	}
	if old := e.bound[key]; old != nil {
		if old.token == h.Token {
			e.regrantLocked(old, o, h, g)
			return true
		}
		e.dropLocked(old)
	}
	b := &bound{key: key, token: h.Token, attempt: g.Attempt, owner: o, legacy: h.Legacy, validUntil: time.Now().Add(g.Validity)}
	b.timer = time.AfterFunc(e.cfg.RenewEvery, func() { e.renew(b) })
	e.bound[key] = b
	o.locks[key] = b
	return true
}

// regrantLocked hands b, granted again as g for h, to o; e.mu is held.
func (e *Engine) regrantLocked(b *bound, o *Owner, h Hold, g Grant) {
	if b.owner.locks[b.key] == b {
		delete(b.owner.locks, b.key)
	}
	b.owner, b.attempt, b.legacy = o, g.Attempt, h.Legacy
	b.validUntil = time.Now().Add(g.Validity)
	o.locks[b.key] = b
}

// unwatch stops renewing key if token is the lock this instance keeps,
// and returns it (nil if it kept none).
func (e *Engine) unwatch(key, token string) *bound {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unwatchLocked(key, token)
}

// unwatchLocked is unwatch with e.mu held.
func (e *Engine) unwatchLocked(key, token string) *bound {
	if b := e.bound[key]; b != nil && b.token == token {
		e.dropLocked(b)
		return b
	}
	return nil
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
		e.stats.RenewFailures.Add(1)
		reason := LostRenewal
		if errors.Is(err, ErrNotHeld) {
			reason = LostGone
		}
		e.dropLocked(b)
		e.loseLocked(b.owner, b.key, b.token, reason, err)
	}
}

// Owner is one client connection's stake in the engine: the
// connection-bound locks it holds.
type Owner struct {
	e    *Engine
	id   uint64
	once sync.Once
	// locks, leases and lost are guarded by e.mu.
	locks  map[string]*bound
	leases ownerLeases       // leases o took through this instance
	lost   map[lockID]string // o's locks found lost, until it hears of it: the reason
	onLost func(key, reason string)
}

// NewOwner returns the owner for the client connection with the given id.
func (e *Engine) NewOwner(id uint64) *Owner {
	return &Owner{e: e, id: id, locks: map[string]*bound{}, lost: map[lockID]string{}}
}

// Close releases every connection-bound lock o holds, or, for a key with a
// lock-delay (Config.LockDelay), keeps it that long; it runs once, when the
// connection closes, however it closed.
func (o *Owner) Close(ctx context.Context) error { return o.close(ctx, true) }

// Release releases every connection-bound lock o holds at once, lock-delay
// or not: the client asked for it (RESET). It runs once, as Close.
func (o *Owner) Release(ctx context.Context) error { return o.close(ctx, false) }

func (o *Owner) close(ctx context.Context, delay bool) error {
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
		e.disownLeasesLocked(o)
		o.onLost = nil
		e.mu.Unlock()
		if delay {
			locks = e.delayAll(ctx, locks)
		}
		err = e.releaseAll(ctx, locks)
	})
	return err
}
