package passthrough

import (
	"errors"
	"fmt"
)

// ErrOutcomeUnknown is matched (errors.Is) by every error of a command that
// was sent to the data Redis and got no reply: it may have run.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// errTimeout is a reply that did not come within the timeout.
var errTimeout = errors.New("no reply within the timeout")

// notSentError is a command that never reached the data Redis: it did not run.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// unknownError is a command sent to the data Redis that got no reply.
type unknownError struct{ err error }

func (e *unknownError) Error() string { return ErrOutcomeUnknown.Error() + ": " + e.err.Error() }

// Unwrap exposes ErrOutcomeUnknown and the cause.
func (e *unknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.err} }

// notSent marks err as the failure of a command that was not sent; nil stays nil.
func notSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err}
}

// unknown marks err as the failure of a command that was sent, unless it
// already says that it was not; nil stays nil.
func unknown(err error) error {
	if err == nil {
		return nil // before ns, which escapes: no allocation per reply
	}
	var ns *notSentError
	if errors.As(err, &ns) || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &unknownError{err}
}

// replyText is the RESP error line (without '-') for a forwarded command
// that failed with err: the one place passthrough's failures become
// client-visible text. An outcome that is unknown is said so, in the lock
// commands' words (TIMEOUT outcome unknown); any other failure is one of a
// command that did not run.
func replyText(addr string, err error) string {
	if errors.Is(err, ErrOutcomeUnknown) {
		return fmt.Sprintf("TIMEOUT outcome unknown: data Redis %s gave no reply (%v); the command may have run", addr, causeOf(err))
	}
	return fmt.Sprintf("ERR data Redis %s unavailable: %v; the command was not run", addr, err)
}

// causeOf is what an unknownError wraps, for the message.
func causeOf(err error) error {
	var u *unknownError
	if errors.As(err, &u) {
		return u.err
	}
	return err
}
