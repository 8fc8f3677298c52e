package engine

import (
	"context"
	"errors"
	"time"
)

// minRetry bounds how soon a waiter retries when it does not know how long
// the holder's lease runs (the attempt lost a race with no holder to name).
const minRetry = 5 * time.Millisecond

// waiter is one client waiting for a key in this instance. It costs no
// goroutine: the waiting LOCK's own goroutine blocks on wake.
type waiter struct {
	wake chan struct{} // buffered 1: wakes coalesce
}

// queue is the FIFO of one key's waiters in this instance; the head is the
// only one that tries to acquire.
type queue []*waiter

// LockWait is Lock that waits, until ctx ends, for key to be free. Waiters
// on one key in this instance are served first-come first-served: only the
// head of the queue tries, when a release of the key is announced
// (Released), and else when the holder's lease would have run out, so a
// lost announcement costs at most that. Across instances, each head holds
// a place in the key's shared line (Hold.Waiter), and the oldest goes
// first.
func (e *Engine) LockWait(ctx context.Context, o *Owner, key string, h Hold) (Grant, error) {
	w, err := e.enqueue(key)
	if err != nil {
		return Grant{}, err
	}
	h.Waiter = &Waiter{ID: NewToken(), Since: time.Now(), Keep: e.cfg.WaiterKeep}
	granted := false
	defer func() {
		e.dequeue(key, w)
		if !granted {
			e.leave(ctx, key, h.Waiter.ID)
		}
	}()
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		if e.isClosing() {
			return Grant{}, ErrShuttingDown
		}
		var after <-chan time.Time
		if e.isHead(key, w) {
			g, err := e.Lock(ctx, o, key, h)
			var busy *BusyError
			switch {
			case err == nil:
				granted = true
				return g, nil
			case errors.As(err, &busy):
				// Try again when the lease runs out, and often enough to keep
				// this waiter's place in line.
				retry = resetTimer(retry, min(max(busy.RetryAfter, minRetry), e.cfg.WaiterKeep/3))
			case errors.Is(err, ErrNotAcquired):
				retry = resetTimer(retry, minRetry)
			default:
				return g, err
			}
			after = retry.C
		}
		select {
		case <-w.wake:
		case <-after:
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		}
	}
}

// resetTimer arms t (creating it if nil) to fire after d.
func resetTimer(t *time.Timer, d time.Duration) *time.Timer {
	if t == nil {
		return time.NewTimer(d)
	}
	t.Reset(d)
	return t
}

// Released announces that key may be free: the head of its queue tries.
// Releases through any instance reach it (upstream notifications), and
// those through this one call it directly.
func (e *Engine) Released(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if q := e.waiting[key]; len(q) > 0 {
		q[0].signal()
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// enqueue adds a waiter at the tail of key's queue.
func (e *Engine) enqueue(key string) (*waiter, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return nil, ErrShuttingDown
	}
	if e.waiters >= e.cfg.MaxWaiters {
		return nil, ErrTooManyWaiters
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	e.waiting[key] = append(e.waiting[key], w)
	e.waiters++
	return w, nil
}

// leave gives up the waiter's place in key's line, on a context of its own:
// the client may be gone.
func (e *Engine) leave(ctx context.Context, key, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.OpTimeout)
	defer cancel()
	_ = e.backend.Leave(ctx, key, id) // a place not left expires after WaiterKeep
}

// dequeue removes w from key's queue. When w was the head, the next waiter
// becomes head and tries at once: for the lock if w left without it, for
// its place in the line across instances if w got it.
func (e *Engine) dequeue(key string, w *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.waiting[key]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		e.waiters--
		if len(q) == 0 {
			delete(e.waiting, key)
			return
		}
		e.waiting[key] = q
		if i == 0 {
			q[0].signal()
		}
		return
	}
}

func (e *Engine) isHead(key string, w *waiter) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.waiting[key]
	return len(q) > 0 && q[0] == w
}

// Waiters is the number of clients waiting for key in this instance, or
// for any key when key is empty.
func (e *Engine) Waiters(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if key == "" {
		return e.waiters
	}
	return len(e.waiting[key])
}
