package engine

import (
	"context"
	"errors"
	"time"
)

// minRetry bounds how soon a waiter retries when it does not know how long
// the holder's lease runs (the attempt lost a race with no holder to name).
const minRetry = 5 * time.Millisecond

// unavailableRetry is how often a waiter tries while the backend is
// unavailable (ErrUnavailable).
const unavailableRetry = 50 * time.Millisecond

// waiter is one client waiting for a key in this instance. It costs no
// goroutine: the waiting LOCK's own goroutine blocks on wake.
type waiter struct {
	wake   chan struct{} // buffered 1: wakes coalesce
	place  Waiter        // its place in the key's line across instances
	client uint64        // the waiting connection's id (its Owner's)
	// promoted (guarded by Engine.mu) marks a wake that only says "you
	// head the queue now": the grant that promoted it put it in line, and
	// the key is held, so it arms its retry timer without trying.
	promoted bool
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
	if h.Token == "" {
		h.Token = NewToken()
	}
	want := e.shaped(h)
	w, err := e.enqueue(key, o, Waiter{ID: h.Token, Since: time.Now(), Keep: e.cfg.WaiterKeep, TTL: want.TTL, Mode: want.Mode, Name: h.Name})
	if err != nil {
		return Grant{}, err
	}
	h.Waiter = &w.place
	granted := false
	defer func() {
		e.dequeue(key, w, granted)
		if !granted {
			e.leave(ctx, key, w.place.ID)
		}
	}()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	try := true // the first time, and after every wake
	for {
		if e.isClosing() {
			return Grant{}, ErrShuttingDown
		}
		var after <-chan time.Time
		if next, head := e.position(key, w); head {
			after = retry.C
			if try {
				h.Next = next
				g, err := e.Lock(ctx, o, key, h)
				switch {
				case errors.Is(err, ErrUnavailable): // the wait outlasts a passing outage
					retry.Reset(unavailableRetry)
				case err == nil || !errors.Is(err, ErrNotAcquired):
					granted = err == nil
					return g, err
				default:
					retry.Reset(e.retryAfter(err))
				}
			} else {
				// Head since a grant, not tried yet: the grant put it in line;
				// try within a third of its keep, which keeps its place.
				retry.Reset(e.cfg.WaiterKeep / 3)
			}
		}
		select {
		case <-w.wake:
			try = !e.takePromoted(w)
		case <-after:
			try = true
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		}
	}
}

// takePromoted reports and clears w's promoted mark.
func (e *Engine) takePromoted(w *waiter) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := w.promoted
	w.promoted = false
	return p
}

// retryAfter is when a refused head tries again: when the holder's lease
// runs out, and often enough to keep its place in line.
func (e *Engine) retryAfter(err error) time.Duration {
	d := minRetry
	var busy *BusyError
	if errors.As(err, &busy) {
		d = max(busy.RetryAfter, minRetry)
	}
	return min(d, e.cfg.WaiterKeep/3)
}

// Released announces that key may be free: token released it (or, for a
// waiter's token, gave up its place in key's line), through any instance;
// an empty token is an announcement with no releaser to name (a watched
// ZooKeeper node gone). The head of key's queue tries. The echo of a
// release made through this instance is ignored: it woke its waiters
// already, and waking them again would only make the next one try while
// the key is held.
func (e *Engine) Released(key, token string) {
	e.mu.Lock()
	r := e.locks[key]
	own := token != "" && r != nil && r.echo == token
	e.mu.Unlock()
	if !own {
		e.wakeHead(key)
	}
}

// releasedHere records that token released key through this instance (to
// tell the release's echo: the record keeps it until a sweep drops it),
// forgets its lease, and wakes the key's first waiter — unless early, the
// one woken when the release was sent, has moved on (its early try got the
// lock).
func (e *Engine) releasedHere(key, token string, early *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.recordLocked(key)
	if r.holds(token) && r.mode == Lease {
		e.dropLocked(r)
	}
	r.echo = token
	if q := r.waiting; len(q) > 0 && (early == nil || q[0] == early) {
		q[0].promoted = false
		q[0].signal()
	}
}

// line is key's first two waiters in this instance (fewer if fewer wait).
func (e *Engine) line(key string) []Waiter {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.queueLocked(key)
	if len(q) == 0 {
		return nil // no allocation on a release nobody waits for
	}
	line := make([]Waiter, 0, 2)
	for _, w := range q[:min(len(q), 2)] {
		line = append(line, w.place)
	}
	return line
}

// wakeHead wakes key's first waiter to try, and returns it (nil if none).
func (e *Engine) wakeHead(key string) *waiter {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.queueLocked(key)
	if len(q) == 0 {
		return nil
	}
	q[0].promoted = false
	q[0].signal()
	return q[0]
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// enqueue adds o's waiter at the tail of key's queue.
func (e *Engine) enqueue(key string, o *Owner, place Waiter) (*waiter, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return nil, ErrShuttingDown
	}
	if e.waiters >= e.cfg.MaxWaiters {
		return nil, ErrTooManyWaiters
	}
	w := &waiter{wake: make(chan struct{}, 1), place: place, client: o.id}
	r := e.recordLocked(key)
	r.waiting = append(r.waiting, w)
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
// becomes head: it tries at once if w left without the lock; if w got it,
// w's grant put the next one in line already, and it only arms its timer.
func (e *Engine) dequeue(key string, w *waiter, granted bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.locks[key] // kept while w waits in it
	for i, x := range r.waiting {
		if x != w {
			continue
		}
		q := append(r.waiting[:i], r.waiting[i+1:]...)
		e.waiters--
		if len(q) == 0 {
			r.waiting = nil // the record is swept once it holds nothing else
			return
		}
		r.waiting = q
		if i == 0 {
			q[0].promoted = granted
			q[0].signal()
		}
		return
	}
}

// position reports whether w heads key's queue and, if so, the place of
// the waiter after it (nil for none).
func (e *Engine) position(key string, w *waiter) (next *Waiter, head bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.queueLocked(key)
	if len(q) == 0 || q[0] != w {
		return nil, false
	}
	if len(q) > 1 {
		p := q[1].place
		return &p, true
	}
	return nil, true
}

// Waiters is the number of clients waiting for key in this instance, or
// for any key when key is empty.
func (e *Engine) Waiters(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if key == "" {
		return e.waiters
	}
	return len(e.queueLocked(key))
}

// queueLocked is key's waiters in this instance; e.mu is held.
func (e *Engine) queueLocked(key string) queue {
	if r := e.locks[key]; r != nil {
		return r.waiting
	}
	return nil
}
