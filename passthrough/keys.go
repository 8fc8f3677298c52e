package passthrough

import (
	"bytes"

	"github.com/lockproxy/lockproxy/pubsub"
)

// local are the commands lockproxy always answers itself: the handshake and
// connection commands, and the native lock commands.
var local = set("hello", "auth", "ping", "echo", "readonly", "quit", "reset", "client", "command", "info",
	"lock", "unlock", "renew", "lockinfo", "script")

// lockCapable are the commands the lock service serves on a lock key.
var lockCapable = set("set", "setnx", "get", "exists", "ttl", "pttl", "expire", "pexpire",
	"del", "unlink", "delex", "delifeq", "eval", "evalsha")

// unrelayed are commands after which the data Redis sends a replication
// stream, which lockproxy does not relay: they are refused.
var unrelayed = set("sync", "psync")

// stateful are commands that leave state on their upstream connection: a
// client sending one gets a connection of its own from then on.
var stateful = set("multi", "exec", "discard", "watch", "unwatch", "select", "swapdb", "client", "hello",
	"readonly", "readwrite", "asking", "reset", "auth")

// blocking are commands that wait on the data Redis without a time bound.
var blocking = set("blpop", "brpop", "brpoplpush", "blmove", "blmpop", "bzpopmin", "bzpopmax", "bzmpop",
	"xread", "xreadgroup", "wait", "waitaof")

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// matcher says which keys are lock keys: those that match one of its
// patterns as Redis's KEYS would (pubsub.Match).
type matcher []string

func (m matcher) isLock(key []byte) bool {
	for _, p := range m {
		if pubsub.Match(p, string(key)) {
			return true
		}
	}
	return false
}

// hasNX reports whether SET's options include NX.
func hasNX(args [][]byte) bool {
	for _, a := range args[3:] {
		if bytes.EqualFold(a, []byte("nx")) {
			return true
		}
	}
	return false
}
