package quorum

import "errors"

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
