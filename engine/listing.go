package engine

import (
	"context"
	"slices"
	"time"
)

// Listed is a lock as LOCKPROXY LOCKS shows it. It never holds the token.
type Listed struct {
	Key      string
	Fence    int64
	Validity time.Duration
	Mode     Mode   // Bound or Lease, as the store records it
	Name     string // the holder's client name
	// HeldHere is true when the lock was granted through this instance.
	HeldHere bool
	// Client is the id of this instance's connection that holds the lock
	// bound to it; 0 for a lease or a lock held through another instance.
	Client  uint64
	Waiters int // clients waiting for the key in this instance
}

// ListedWaiter is a client of this instance waiting for a key.
type ListedWaiter struct {
	Key    string
	Client uint64        // its connection's id
	Waited time.Duration // since it began to wait
}

// mine is what this instance knows of a key it lists: the token it
// granted (bound or lease), the connection of a bound lock, its waiters.
type mine struct {
	token   string
	client  uint64
	waiters int
}

// candidates are the keys matching match that this instance holds or
// waits for, sorted, with what it knows of them.
func (e *Engine) candidates(match func(string) bool) ([]string, map[string]mine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	known := map[string]mine{}
	for k, r := range e.locks {
		if !match(k) {
			continue
		}
		m := mine{waiters: len(r.waiting)}
		if r.mode == Bound {
			m.token, m.client = r.token, r.owner.id
		} else if r.token != "" && now.Before(r.until) {
			m.token = r.token
		}
		if m.token != "" || m.waiters > 0 {
			known[k] = m
		}
	}
	keys := make([]string, 0, len(known))
	for k := range known {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, known
}

// Locks lists, in key order, at most count locks whose key matches match
// and that were granted through this instance or that its clients wait
// for. Each is read from the store (Inspect), so what it shows is current;
// a key nobody holds any more is left out. An error from the store ends
// the listing: a partial list would look complete.
func (e *Engine) Locks(ctx context.Context, match func(string) bool, count int) ([]Listed, error) {
	keys, known := e.candidates(match)
	var out []Listed
	for _, k := range keys {
		if len(out) >= count {
			break
		}
		h, ok, err := e.backend.Inspect(ctx, k)
		if err != nil {
			return nil, err
		}
		m := known[k]
		here := ok && m.token != "" && h.Token == m.token
		if !here && m.client == 0 && m.token != "" {
			e.forget(k, m.token, Lease) // released or taken over elsewhere
		}
		if !ok || !here && m.waiters == 0 {
			continue
		}
		l := Listed{Key: k, Fence: h.Fence, Validity: h.Validity, Mode: h.Mode, Name: h.Name, HeldHere: here, Waiters: m.waiters}
		if here {
			l.Client = m.client
		}
		out = append(out, l)
	}
	return out, nil
}

// WaitingList lists, by key and then first come first, at most count
// clients of this instance waiting for a key that matches match.
func (e *Engine) WaitingList(match func(string) bool, count int) []ListedWaiter {
	e.mu.Lock()
	defer e.mu.Unlock()
	var keys []string
	for k, r := range e.locks {
		if len(r.waiting) > 0 && match(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	now := time.Now()
	var out []ListedWaiter
	for _, k := range keys {
		for _, w := range e.locks[k].waiting {
			if len(out) >= count {
				return out
			}
			out = append(out, ListedWaiter{Key: k, Client: w.client, Waited: now.Sub(w.place.Since)})
		}
	}
	return out
}
