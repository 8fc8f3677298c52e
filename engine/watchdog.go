package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// armLocked starts r's bound lock's timer, which renews it every
// RenewEvery; no goroutine waits between renewals. e.mu is held.
func (e *Engine) armLocked(r *record) {
	if r.timer == nil {
		r.timer = time.AfterFunc(e.cfg.RenewEvery, func() { e.renew(r) })
		return
	}
	r.timer.Reset(e.cfg.RenewEvery)
}

// renew runs on r's timer: it extends the bound lock and re-arms, or, when
// the lock is gone or its validity ran out without a renewal, declares it
// lost. A lock released, replaced or granted again meanwhile is left alone.
func (e *Engine) renew(r *record) {
	e.mu.Lock()
	key, token, gen, bound := r.key, r.token, r.gen, r.mode == Bound
	e.mu.Unlock()
	if !bound {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(e.cfg.OpTimeout, e.cfg.RenewEvery))
	defer cancel()
	v, err := e.backend.Extend(ctx, key, token, e.cfg.BoundLease, Bound)
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.gen != gen {
		return
	}
	switch {
	case err == nil:
		e.stats.Renewals.Add(1)
		r.until = time.Now().Add(v)
		r.timer.Reset(e.cfg.RenewEvery)
	case errors.Is(err, ErrNotBound): // EXPIRE made it a lease, maybe through another instance
		e.log.Info("connection-bound lock became a lease; no longer renewed", zap.String("key", key))
		e.dropLocked(r)
	case !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLost) && time.Until(r.until) > e.cfg.RenewEvery/3:
		e.stats.RenewFailures.Add(1)
		e.log.Warn("renewal failed; retrying while the lease lasts", zap.String("key", key), zap.Error(err))
		r.timer.Reset(e.cfg.RenewEvery / 3)
	default:
		e.stats.RenewFailures.Add(1)
		reason := LostRenewal
		if errors.Is(err, ErrNotHeld) {
			reason = LostGone
		}
		e.loseHeldLocked(r, reason, err)
	}
}

// Owner is one client connection's stake in the engine: the locks it took
// through this instance, and their losses it has not heard of.
type Owner struct {
	e    *Engine
	id   uint64
	once sync.Once
	// held, lost and onLost are guarded by e.mu.
	held   *record // the first of o's locks, bound and lease, linked by record.next
	lost   []*loss // o's losses not yet reported
	onLost func(key, reason string)
}

// NewOwner returns the owner for the client connection with the given id.
func (e *Engine) NewOwner(id uint64) *Owner { return &Owner{e: e, id: id} }

// Close releases every connection-bound lock o holds, or, for a key with a
// lock-delay (Config.LockDelay), keeps it that long; it runs once, when the
// connection closes, however it closed.
func (o *Owner) Close(ctx context.Context) error { return o.close(ctx, true) }

// Release releases every connection-bound lock o holds at once, lock-delay
// or not: the client asked for it (RESET). It runs once, as Close.
func (o *Owner) Release(ctx context.Context) error { return o.close(ctx, false) }

// close forgets o's losses, leaves its leases listed until they end, and
// releases (or delays) its bound locks.
func (o *Owner) close(ctx context.Context, delay bool) error {
	var err error
	o.once.Do(func() {
		e := o.e
		e.mu.Lock()
		var locks []ref
		for r := o.held; r != nil; {
			next := r.next
			if r.mode == Bound {
				locks = append(locks, ref{r.key, r.token, r.attempt})
			} else {
				r.setOwner(nil)
			}
			r = next
		}
		for len(o.lost) > 0 {
			e.toldLocked(o.lost[0])
		}
		o.onLost = nil
		e.mu.Unlock()
		if delay {
			locks = e.delayAll(ctx, locks)
		}
		err = e.releaseAll(ctx, locks)
	})
	return err
}
