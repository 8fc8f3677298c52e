package quorum

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Claim is one node's answer to an acquire.
type Claim struct {
	// State says whether the node now holds the lock for the token.
	State ClaimState
	// Counter is the node's fencing counter for the key, read atomically
	// with the acquire.
	Counter int64
	// Fence is the fence committed for the token on this node when State is
	// Mine (0 if none was committed yet).
	Fence int64
}

// ClaimState is the outcome of an acquire on one node.
type ClaimState int

const (
	Taken    ClaimState = iota // another token holds the key on this node
	Acquired                   // the key was free and is now held by the token
	Mine                       // the token already held the key; its TTL was reset
)

// Entry is what one node stores for a held key.
type Entry struct {
	Token string
	Fence int64
	Mode  engine.Mode
	Name  string
	TTL   time.Duration // remaining time to live on the node
}

// Node is one independent Redis node as the Redlock algorithm sees it.
// Every method is atomic on the node (a Lua script) and honours ctx.
type Node interface {
	// Acquire sets key to h.Token with TTL h.TTL if the key is free, or
	// resets the TTL if h.Token already holds it, and reads the key's fencing
	// counter in the same step.
	Acquire(ctx context.Context, key string, h engine.Hold) (Claim, error)
	// Commit raises the key's fencing counter to at least fence, and records
	// fence for token if token holds the key; held reports the latter.
	Commit(ctx context.Context, key, token string, fence int64) (held bool, err error)
	// Extend resets the TTL of key to ttl if token holds it — a zero ttl
	// reuses the TTL the key was last given — and, if mode is not empty,
	// records mode. It returns the TTL applied, or 0 if token does not hold
	// the key.
	Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error)
	// Release deletes key if token holds it.
	Release(ctx context.Context, key, token string) (bool, error)
	// Inspect reads the entry of key; ok is false when the key is free.
	Inspect(ctx context.Context, key string) (e Entry, ok bool, err error)
	// String names the node (its address) in errors.
	String() string
}
