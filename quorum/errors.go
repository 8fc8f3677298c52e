package quorum

import (
	"errors"
	"fmt"
	"time"
)

// ErrSuspected is the presumed failure of a suspected node that a fan-out
// did not wait for: it failed its recent calls in a row.
var ErrSuspected = errors.New("not waited for: the node failed its recent calls")

// NodeError is the failure of one node, carrying the node's name.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return e.Node + ": " + e.Err.Error() }

// Unwrap returns the node's own error.
func (e *NodeError) Unwrap() error { return e.Err }

// ErrClockJumped is the answer of a node whose wall clock jumped (forward
// or back) by more than the drift allowance since its previous reply: it
// counts toward nothing, and the node is held out (clock.go). Replies
// carry it as a *ClockJumpError.
var ErrClockJumped = errors.New("node clock jumped")

// ClockJumpError is a node's answer in a pipeline whose time showed that
// its clock jumped: it matches ErrClockJumped.
type ClockJumpError struct {
	// Jump is how far the clock moved beyond its last reading at least:
	// positive forward, negative back.
	Jump time.Duration
	// Most, for a step forward seen between two replies, is how far the
	// clock may have moved at most (the far bound of the two replies'
	// intervals): the node dropped each key at most that much early. Zero
	// otherwise (a First jump's Jump is its far bound already).
	Most time.Duration
	// Allowance is the drift allowance and the round trips' uncertainty
	// it exceeded.
	Allowance time.Duration
	// First: the node's first reply to this process, whose clock was
	// Jump away from this process's own wall clock, more than the skew
	// allowed (Allowance): a jump before this instance started.
	First bool
	// Silence, with First, is the time since the node's previous reply:
	// a node in step with this process then, off it now, after a silence
	// in which the drift allowance hides a jump of the allowed skew. Zero:
	// its first reply.
	Silence time.Duration
}

func (e *ClockJumpError) Error() string {
	if e.First && e.Silence > 0 {
		return fmt.Sprintf("node clock is %s off this instance's after %v without a reply (more than the %v skew allowed, redlock.clock_skew_ms): taken as jumped, its answer does not count", signed(e.Jump), e.Silence.Round(time.Second), e.Allowance.Round(time.Millisecond))
	}
	if e.First {
		return fmt.Sprintf("node clock is %s off this instance's at first contact (more than the %v skew allowed, redlock.clock_skew_ms): taken as jumped, its answer does not count", signed(e.Jump), e.Allowance.Round(time.Millisecond))
	}
	return fmt.Sprintf("node clock jumped %s (more than the %v drift allowance since its previous reply): its answer does not count", signed(e.Jump), e.Allowance.Round(time.Millisecond))
}

// Is makes a ClockJumpError match ErrClockJumped.
func (e *ClockJumpError) Is(target error) bool { return target == ErrClockJumped }

// signed is d rounded to milliseconds, with its sign: "+10s", "-520ms".
func signed(d time.Duration) string {
	d = d.Round(time.Millisecond)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}
