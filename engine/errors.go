package engine

import "errors"

var (
	// ErrNotAcquired means another holder has the key.
	ErrNotAcquired = errors.New("lock is held by another token")
	// ErrNotHeld means the token does not hold the key (never did, expired,
	// or released).
	ErrNotHeld = errors.New("lock is not held by that token")
	// ErrLost means lockproxy had been keeping this lock alive for its holder
	// and learned that it was lost (a renewal failed); another client may
	// hold it now. It is reported once, on the holder's next RENEW or UNLOCK.
	ErrLost = errors.New("lock was lost")
	// ErrShuttingDown means the engine no longer takes new locks.
	ErrShuttingDown = errors.New("lockproxy is shutting down")
)
