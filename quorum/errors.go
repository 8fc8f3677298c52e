package quorum

import (
	"errors"
	"fmt"
)

// ErrNoQuorum is matched (errors.Is) by every NoQuorumError.
var ErrNoQuorum = errors.New("no quorum")

// ErrSuspected is the presumed failure of a suspected node that a fan-out
// did not wait for: it failed its recent calls in a row.
var ErrSuspected = errors.New("not waited for: the node failed its recent calls")

// NoQuorumError says that fewer than a majority of nodes answered, so the
// outcome of the operation is unknown and nothing was granted.
type NoQuorumError struct {
	Op       string // "acquire", "extend", "release", "inspect"
	Answered int    // nodes that gave an answer (any answer)
	Needed   int    // the quorum, N/2+1
	Nodes    int    // N
	Err      error  // the per-node errors, joined
}

func (e *NoQuorumError) Error() string {
	return fmt.Sprintf("%s: %d of %d nodes answered, %d needed: %v", e.Op, e.Answered, e.Nodes, e.Needed, e.Err)
}

// Unwrap exposes ErrNoQuorum and the per-node errors.
func (e *NoQuorumError) Unwrap() []error { return []error{ErrNoQuorum, e.Err} }

// NodeError is the failure of one node, carrying the node's name.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return e.Node + ": " + e.Err.Error() }

// Unwrap returns the node's own error.
func (e *NodeError) Unwrap() error { return e.Err }
