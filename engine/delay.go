package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Lock-delay, as Chubby and Consul have it: a connection-bound lock whose
// connection closed without releasing it is not released but turned into
// a lease of the key's delay, with the same token check as a renewal, so
// that the key is not granted again until a holder that was only slow
// could have noticed. The key's first waiter here is woken when it ends;
// waiters elsewhere retry when the lease they were refused by runs out.

// delayAll stops watching, and turns into leases of their delay, the locks
// whose key has a lock-delay; it returns the others, to be released.
func (e *Engine) delayAll(ctx context.Context, locks []ref) []ref {
	if e.cfg.LockDelay == nil {
		return locks
	}
	var rest []ref
	var wg sync.WaitGroup
	for _, b := range locks {
		d := e.cfg.LockDelay(b.key)
		if d <= 0 {
			rest = append(rest, b)
			continue
		}
		e.forget(b.key, b.token, Bound)
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.delay(ctx, b.key, b.token, b.attempt, d)
		}()
	}
	wg.Wait()
	return rest
}

// delay makes key, held by token as granted by attempt, a lease of d and
// wakes the key's first waiter when d has passed. When that fails the lock
// keeps the bound lease it has, which ends it at most that long after its
// last renewal. A later grant of the token (through another instance) is
// left as it is (WithAttempt).
func (e *Engine) delay(ctx context.Context, key, token, attempt string, d time.Duration) {
	ctx, cancel := context.WithTimeout(WithAttempt(context.WithoutCancel(ctx), attempt), e.cfg.OpTimeout)
	defer cancel()
	_, err := e.backend.Extend(ctx, key, token, d, Lease)
	switch {
	case err == nil:
		e.stats.Delayed.Add(1)
		e.log.Info("connection closed holding a lock: not granted again for its lock-delay",
			zap.String("key", key), zap.Duration("lock_delay", d))
		time.AfterFunc(d, func() { e.wakeHead(key) })
	case errors.Is(err, ErrNotHeld):
		// Gone already (taken, or expired): nothing to delay.
	default:
		e.log.Warn("lock-delay could not be set; the lock expires with its bound lease",
			zap.String("key", key), zap.Duration("lease", e.cfg.BoundLease), zap.Error(err))
	}
}
