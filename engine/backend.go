package engine

import (
	"context"
	"time"
)

// Mode says how a lock is kept alive.
type Mode string

const (
	// Bound locks are renewed by lockproxy while the client's connection
	// lives and released when it closes.
	Bound Mode = "bound"
	// Lease locks live until UNLOCK or until their TTL runs out.
	Lease Mode = "lease"
)

// Hold describes the lock a client asks for.
type Hold struct {
	Token string        // the holder's secret; compared on renew and release
	TTL   time.Duration // the lease on the store; for Bound locks, the watchdog lease
	Mode  Mode
	Name  string // the holder's client name, shown by LOCKINFO; may be empty
	// Waiter is set for a client that waits for the lock (LOCK ... WAIT): it
	// keeps the client's place in the key's line, which every instance
	// shares. Its ID is Token. Nil for a client that tries once.
	Waiter *Waiter
	// Next, when set, is the waiter that comes after this one in this
	// instance: it takes its place in the key's line when this acquire
	// succeeds, in the same step.
	Next *Waiter
	// Fresh refuses the key even when Token already holds it, as SET NX
	// does: legacy lock values need not be unique ("SETNX lock 1"), so
	// the same value from another client must not count as a retry.
	Fresh bool
	// Legacy marks a lock taken by a legacy command (SET NX, SETNX, a lock
	// script). Legacy code unlocks with DEL from whichever pooled
	// connection, as Redis lets it, so a DEL from another connection is
	// not reported to its holder as a loss (Engine.Take); everything else
	// is.
	Legacy bool
}

// Waiter is a place in a key's line of waiters. Older waiters go first: a
// free key is granted only to the first live waiter in line, or to anyone
// when the line is empty.
type Waiter struct {
	ID    string        // names the place: the waiter's lock token
	Since time.Time     // when the client began to wait: orders the line
	Keep  time.Duration // how long the place lasts unless the waiter tries again
	// The lock the waiter will ask for, with the TTL and Mode Lock gives
	// it, so that a backend can hand a released key straight to it.
	TTL  time.Duration
	Mode Mode
	Name string
}

// Grant is a lock the backend handed out.
type Grant struct {
	Token    string
	Fence    int64         // strictly increasing per key across grants
	Validity time.Duration // how long the grant is safe to use from now
	// Attempt names the backend's attempt that made this grant, for a
	// release bound to it (WithAttempt); "" when the backend has none.
	Attempt string
}

// Holder describes who holds a key. LOCKINFO never shows Token; the legacy
// GET does, as Redis shows a lock's value.
type Holder struct {
	Token    string
	Fence    int64
	Validity time.Duration
	Mode     Mode
	Name     string
	// Type is the Redis TYPE of a value the backend did not write, held by
	// a token it does not know (Token ""); "" for a lock's own string.
	Type string
}

// Backend is the store the engine takes locks in. Implementations must be
// safe for concurrent use. Every call may block and honours ctx.
type Backend interface {
	// Acquire takes key for h. It returns ErrNotAcquired when another token
	// holds the key. Acquiring again with the token that holds the key
	// succeeds with the same fence (an idempotent retry).
	Acquire(ctx context.Context, key string, h Hold) (Grant, error)
	// Extend resets the lease of key held by token to ttl — a zero ttl
	// reuses the lease the lock was last given — and, when mode is not
	// empty, records the new mode. It returns the new validity or
	// ErrNotHeld. Mode Bound is the watchdog's renewal: it fails with
	// ErrNotBound where the lock has become a lease.
	Extend(ctx context.Context, key, token string, ttl time.Duration, mode Mode) (time.Duration, error)
	// Release frees key if token holds it; false means it did not. line is
	// this instance's first waiters for key, at most two (none: nobody
	// waits here); the engine wakes the first itself, so the store need not
	// announce the release when nobody else is in line, and a store may
	// hand it the key, and give the second its place in line, in the
	// release's own step. sent, when not nil, runs once the release is on
	// its way, such that an acquire started after it sees the key
	// released: the engine wakes the next waiter then.
	Release(ctx context.Context, key, token string, line []Waiter, sent func()) (bool, error)
	// Leave takes waiter out of key's line and announces that the next
	// waiter may go. Best effort: a place that is not left expires.
	Leave(ctx context.Context, key, waiter string) error
	// Inspect reports the holder of key; ok is false when nobody holds it.
	Inspect(ctx context.Context, key string) (h Holder, ok bool, err error)
	// Close releases the backend's connections.
	Close() error
}

// Events is the one way a backend tells the engine what it learned on its
// own, outside a call the engine made: the engine implements it and is
// handed to the backend when the backend is built (see New).
type Events interface {
	// Released says key may be free: token released it through any
	// instance (token is empty when unknown), or a lock node that a waiter
	// here watched is gone. The echo of a release made through this
	// instance is ignored.
	Released(key, token string)
	// Lost says token's lock on key, granted through this instance, is
	// gone behind its holder's back (its ZooKeeper session expired). The
	// engine counts it and reports ErrLost to the holder's next RENEW or
	// UNLOCK.
	Lost(key, token string)
	// The engine also has Taken(key, token), which a backend may find by
	// type assertion: token's lock on key was taken by a DEL through
	// another instance (reason "deleted"; see Taking).
}
