package upstream

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrClosed means the node was closed before or during the call, or
	// the Subscription was closed.
	ErrClosed = errors.New("upstream: node is closed")
	// ErrNoScript means the node did not have a script in its cache (it
	// restarted or ran SCRIPT FLUSH). RedisNode handles it by sending the
	// script's source; callers see it only if that fails too.
	ErrNoScript = errors.New("upstream: script is not loaded on the node")
	// ErrBadReply means a node answered with a reply of an unexpected shape.
	ErrBadReply = errors.New("upstream: unexpected reply from node")
	// ErrNoClock answers the calls of a pipeline whose TIME the node did
	// not answer with its time (an ACL without +time, a renamed command):
	// their votes cannot be checked against a clock jump (clock.go).
	ErrNoClock = errors.New("upstream: the node's TIME cannot be read, so its clock cannot be checked for jumps: its answer does not count (allow TIME to lockproxy's user)")
)

// NodeError is an error from one node, carrying the node's address.
type NodeError struct {
	Addr string
	Err  error
}

func (e *NodeError) Error() string { return e.Addr + ": " + e.Err.Error() }

func (e *NodeError) Unwrap() error { return e.Err }

// typed turns a raw go-redis reply error into a typed one. It is the only
// place that reads the text of a node's reply.
// Most replies are no error: they are passed on before HasErrorPrefix,
// which allocates on every call.
func typed(err error) error {
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return fmt.Errorf("%w: %w", ErrNoScript, err)
	}
	return err
}

// badReply reports a reply that does not have the shape a script returns.
func badReply(script string, v any) error {
	return fmt.Errorf("%w: %s returned %#v", ErrBadReply, script, v)
}

// isNodeFailure reports whether a node's error reply to a script says
// that the node cannot run it now (busy with another script, loading,
// out of memory, read-only, not authenticated, ...), rather than being
// the script's own error.
func isNodeFailure(err error) bool {
	for _, p := range []string{"BUSY", "LOADING", "MASTERDOWN", "NOAUTH", "WRONGPASS", "NOPERM", "READONLY",
		"TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "MISCONF", "OOM", "NOSCRIPT"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
