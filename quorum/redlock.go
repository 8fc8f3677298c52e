package quorum

import (
	"context"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Defaults for Config's zero fields.
const (
	DefaultNodeTimeout = 100 * time.Millisecond
	DefaultDriftFactor = 0.01
	DefaultDriftFixed  = 2 * time.Millisecond
)

// Config tunes a Redlock.
type Config struct {
	// NodeTimeout bounds each call to one node (default 100ms).
	NodeTimeout time.Duration
	// DriftFactor is the clock drift allowed per unit of TTL (default 0.01).
	DriftFactor float64
	// DriftFixed is added to the drift allowance (default 2ms).
	DriftFixed time.Duration
}

// Redlock takes locks on a majority of independent nodes. It implements
// engine.Backend.
type Redlock struct {
	nodes  []Node
	quorum int
	cfg    Config

	mu       sync.Mutex
	inflight map[grantID]chan struct{} // grants whose acquires beyond the quorum are still in flight; closed once landed
}

type grantID struct{ key, token string }

var _ engine.Backend = (*Redlock)(nil)

// New returns a Redlock over nodes; a majority (len/2+1) decides.
func New(nodes []Node, cfg Config) *Redlock {
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = DefaultNodeTimeout
	}
	if cfg.DriftFactor <= 0 {
		cfg.DriftFactor = DefaultDriftFactor
	}
	if cfg.DriftFixed <= 0 {
		cfg.DriftFixed = DefaultDriftFixed
	}
	return &Redlock{nodes: nodes, quorum: len(nodes)/2 + 1, cfg: cfg, inflight: map[grantID]chan struct{}{}}
}

// settle remembers a grant's acquires that are still in flight until they
// land, so that a release does not overtake them and leave the key set on
// a node after the holder let go.
func (r *Redlock) settle(key, token string, calls *flight) {
	if calls.landed() {
		return
	}
	id, done := grantID{key, token}, make(chan struct{})
	r.mu.Lock()
	r.inflight[id] = done
	r.mu.Unlock()
	go func() { // the flight's only reader from now on
		calls.Wait()
		r.mu.Lock()
		if r.inflight[id] == done {
			delete(r.inflight, id)
		}
		r.mu.Unlock()
		close(done)
	}()
}

// landed waits until the acquires of key's grant to token have landed.
func (r *Redlock) landed(key, token string) {
	r.mu.Lock()
	done := r.inflight[grantID{key, token}]
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Quorum is the number of nodes that must agree.
func (r *Redlock) Quorum() int { return r.quorum }

// drift is the clock-drift allowance for a lease of ttl.
func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.cfg.DriftFactor) + r.cfg.DriftFixed
}

// validity is what remains of a lease of ttl taken at start.
func (r *Redlock) validity(ttl time.Duration, start time.Time) time.Duration {
	return ttl - time.Since(start) - r.drift(ttl)
}

// cleanup returns a context for rollback work that outlives a cancelled
// request but not the node timeout.
func (r *Redlock) cleanup(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.NodeTimeout)
}

// Close does nothing: the nodes belong to the caller.
func (r *Redlock) Close() error { return nil }
