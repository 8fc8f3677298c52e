package engine

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotAcquired means another holder has the key.
	ErrNotAcquired = errors.New("lock is held by another token")
	// ErrNotHeld means the token does not hold the key (never did, expired,
	// or released).
	ErrNotHeld = errors.New("lock is not held by that token")
	// ErrLost means lockproxy learned that a lock it granted was lost or
	// taken from its holder (a renewal failed, its session expired, another
	// connection deleted it); another client may hold it now. It is
	// reported once, on the holder's next command about the key. Every
	// LostError matches it.
	ErrLost = errors.New("lock was lost")
	// ErrNotBound refuses a watchdog renewal of a connection-bound lock that
	// became a lease (EXPIRE through any instance): the watchdog stops, and
	// the lock lives as its lease says.
	ErrNotBound = errors.New("lock is no longer connection-bound")
	// ErrUnavailable marks a backend error that is expected to pass (a
	// ZooKeeper connection lost while its session lives, a leader
	// election): nothing was granted, and a waiter tries again.
	ErrUnavailable = errors.New("lock backend unavailable")
	// ErrShuttingDown means the engine no longer takes new locks.
	ErrShuttingDown = errors.New("lockproxy is shutting down")
	// ErrTooManyWaiters means the instance's limit of waiting clients is
	// reached (Config.MaxWaiters).
	ErrTooManyWaiters = errors.New("max number of waiters reached")
)

// LostError is ErrLost with the reason (LostDeleted, LostGone, ...).
type LostError struct{ Reason string }

func (e *LostError) Error() string { return ErrLost.Error() + " (" + e.Reason + ")" }

// Unwrap makes a LostError match ErrLost.
func (e *LostError) Unwrap() error { return ErrLost }

// BusyError is the refusal of an acquire because another token holds the
// key. It matches ErrNotAcquired (errors.Is).
type BusyError struct {
	// RetryAfter is how long the holder's lease still runs, at most: the
	// key is free by then unless the holder renews it.
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v (its lease runs up to %v more)", ErrNotAcquired, e.RetryAfter)
}

// Unwrap makes a BusyError match ErrNotAcquired.
func (e *BusyError) Unwrap() error { return ErrNotAcquired }

// ErrOutcomeUnknown is matched (errors.Is) by every UnknownOutcomeError.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// UnknownOutcomeError says that the store's answers do not decide an
// operation on a lock that may be held: enough nodes answered, but neither
// "done" nor "not held" has a majority, because some nodes did not answer.
// The lock may or may not be held by the token; a release is still carried
// to the nodes that did not answer.
type UnknownOutcomeError struct {
	Op     string // "extend", "release"
	Yes    int    // nodes where the token held the lock (and the op was done)
	No     int    // nodes where it did not hold it
	Silent int    // nodes that did not answer in time
	Err    error  // the silent nodes' errors, joined
}

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("%s: %v: %d nodes held it, %d did not, %d did not answer: %v", e.Op, ErrOutcomeUnknown, e.Yes, e.No, e.Silent, e.Err)
}

// Unwrap exposes ErrOutcomeUnknown and the nodes' errors.
func (e *UnknownOutcomeError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// ErrNoQuorum is matched (errors.Is) by every NoQuorumError.
var ErrNoQuorum = errors.New("no quorum")

// NoQuorumError says that fewer than a majority of a backend's nodes
// answered, so the outcome of the operation is unknown and nothing was
// granted. The Redlock backend returns it.
type NoQuorumError struct {
	Op       string // "acquire", "extend", "release", "inspect"
	Answered int    // nodes that gave an answer (any answer)
	Needed   int    // the quorum, N/2+1
	Nodes    int    // N
	Err      error  // the per-node errors, joined
	// Failed names each node that did not answer and why ("addr: reason"),
	// for the client's error and the log.
	Failed []string
	// Hint, when not empty, says what the operator can do about it.
	Hint string
}

func (e *NoQuorumError) Error() string {
	return fmt.Sprintf("%s: %d of %d nodes answered, %d needed: %v", e.Op, e.Answered, e.Nodes, e.Needed, e.Err)
}

// Unwrap exposes ErrNoQuorum and the per-node errors.
func (e *NoQuorumError) Unwrap() []error { return []error{ErrNoQuorum, e.Err} }
