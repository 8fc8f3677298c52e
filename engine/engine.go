package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults for Config's zero fields.
const (
	DefaultBoundLease = 10 * time.Second
	DefaultOpTimeout  = 5 * time.Second
)

// Config tunes the engine.
type Config struct {
	// BoundLease is the lease a connection-bound lock has on the store; the
	// watchdog renews it while the connection lives (default 10s).
	BoundLease time.Duration
	// RenewEvery is the watchdog's period (default BoundLease/3).
	RenewEvery time.Duration
	// OpTimeout caps one backend operation that has no deadline of its own,
	// such as a renewal or a release on disconnect (default 5s).
	OpTimeout time.Duration
	// MaxWaiters bounds the clients waiting for locks in this instance
	// (default 10000).
	MaxWaiters int
	// WaiterKeep is how long a waiter's place in a key's line lasts on the
	// store unless it tries again; a waiting head tries at least every third
	// of it (default 2s). A node that was down may keep places of waiters
	// served meanwhile, and refuse others, for up to this long.
	WaiterKeep time.Duration
	// LockDelay is each key's lock-delay: when the connection holding a
	// connection-bound lock on key closes without releasing it, the key is
	// not granted again for that long (Owner.Close). nil or 0: released at
	// once.
	LockDelay func(key string) time.Duration
	// AnnounceTaken, when set, tells the other instances that key, held
	// by token, was taken from its holder through this one (Take), so
	// that the instance that granted it tells the holder (Taken). It must
	// not block for long; it runs on a goroutine of its own.
	AnnounceTaken func(key, token string)
}

func (c Config) withDefaults() Config {
	if c.BoundLease <= 0 {
		c.BoundLease = DefaultBoundLease
	}
	if c.RenewEvery <= 0 {
		c.RenewEvery = c.BoundLease / 3
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.MaxWaiters <= 0 {
		c.MaxWaiters = 10000
	}
	if c.WaiterKeep <= 0 {
		c.WaiterKeep = 2 * time.Second
	}
	return c
}

// Engine grants locks through a Backend and keeps connection-bound locks
// alive for their owners.
type Engine struct {
	backend Backend
	cfg     Config
	log     *zap.Logger
	stats   Stats

	mu sync.Mutex
	// locks holds the one record of each key that this instance holds a
	// lock on, waits for, has a loss to report on or released lately
	// (held.go).
	locks   map[string]*record
	sweepAt int       // the size of locks at which a new record first sweeps it
	spare   []*record // records swept out of locks, for reuse
	bound   int       // the bound locks in locks
	waiters int       // the clients waiting in locks
	// lostLeases counts the losses with no owner (leases), which no
	// closing connection clears.
	lostLeases int
	closing    bool
}

// New returns an engine over the backend that build makes; build is
// handed the engine's Events, the backend's one way to report what it
// learns on its own.
func New(build func(Events) (Backend, error), cfg Config, log *zap.Logger) (*Engine, error) {
	e := &Engine{
		cfg:     cfg.withDefaults(),
		log:     log,
		locks:   map[string]*record{},
		sweepAt: minSweep,
	}
	b, err := build(e)
	if err != nil {
		return nil, err
	}
	e.backend = b
	return e, nil
}

var _ Events = (*Engine)(nil)

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// NewToken returns 128 bits of randomness in hex.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Lock takes key for o. A zero h.TTL asks for a connection-bound lock: it is
// taken with the bound lease and renewed until o closes. An empty h.Token is
// replaced by a fresh one.
func (e *Engine) Lock(ctx context.Context, o *Owner, key string, h Hold) (Grant, error) {
	if e.isClosing() {
		return Grant{}, ErrShuttingDown
	}
	if h.Token == "" {
		h.Token = NewToken()
	}
	h = e.shaped(h)
	g, err := e.backend.Acquire(ctx, key, h)
	if err != nil {
		return g, err
	}
	e.stats.Grants.Add(1)
	if !e.granted(o, key, h, g) {
		_ = e.release(WithAttempt(ctx, g.Attempt), key, h.Token) // granted while the engine shut down
		return Grant{}, ErrShuttingDown
	}
	return g, nil
}

// shaped is h, asked of Lock, as Lock asks the backend for it: a lease of
// h.TTL, or a bound lock with the bound lease when h.TTL is zero.
func (e *Engine) shaped(h Hold) Hold {
	h.Mode = Lease
	if h.TTL <= 0 {
		h.Mode, h.TTL = Bound, e.cfg.BoundLease
	}
	return h
}

// Unlock releases key held by token, from any connection.
func (e *Engine) Unlock(ctx context.Context, key, token string) (bool, error) {
	if err := e.unlocking(key, token); err != nil {
		return false, err
	}
	return e.free(ctx, key, token)
}

// free releases key for token and hands it to the key's next waiter: woken
// as soon as the release is on its way, and woken again when the release
// is done if it is still waiting (its early try came too soon).
func (e *Engine) free(ctx context.Context, key, token string) (bool, error) {
	var early *waiter
	ok, err := e.backend.Release(ctx, key, token, e.line(key), func() { early = e.wakeHead(key) })
	if ok {
		e.stats.Releases.Add(1)
		e.releasedHere(key, token, early)
	}
	return ok, err
}

// Renew extends key held by token. A zero ttl renews the lock for the
// lease it already has (a bound lock's is the bound lease); a positive ttl
// makes the lock a lease of ttl. It returns ErrNotHeld when token does not
// hold key.
func (e *Engine) Renew(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	if err := e.takeLost(key, token); err != nil {
		return 0, err
	}
	mode := Lease
	if ttl <= 0 {
		ttl, mode = 0, ""
	}
	v, err := e.backend.Extend(ctx, key, token, ttl, mode)
	if err == nil {
		e.renewed(key, token, mode, v)
	}
	return v, err
}

// Info reports who holds key.
func (e *Engine) Info(ctx context.Context, key string) (Holder, bool, error) {
	return e.backend.Inspect(ctx, key)
}

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// BoundHeld is the number of connection-bound locks this instance keeps.
func (e *Engine) BoundHeld() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bound
}

// Shutdown stops granting locks and releases every connection-bound lock
// this instance holds; ctx bounds the wait.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	all := make([]ref, 0, e.bound)
	for _, r := range e.locks {
		for _, w := range r.waiting {
			w.signal() // each stops waiting with ErrShuttingDown
		}
		if r.mode == Bound {
			all = append(all, ref{r.key, r.token, r.attempt})
		}
	}
	e.mu.Unlock()
	return e.releaseAll(ctx, all)
}

func (e *Engine) isClosing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closing
}

// releaseAll stops watching and releases locks in parallel.
func (e *Engine) releaseAll(ctx context.Context, locks []ref) error {
	var wg sync.WaitGroup
	errs := make([]error, len(locks))
	for i, b := range locks {
		e.forget(b.key, b.token, Bound)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.release(WithAttempt(ctx, b.attempt), b.key, b.token)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// release frees a lock on behalf of a holder that is gone, on a context of
// its own so that the client's cancellation does not leave it held. A
// connection-bound lock's release is bound to the attempt this instance
// granted it with (WithAttempt): a close releases only what this instance
// granted, not a re-grant of the same token through another instance.
func (e *Engine) release(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.OpTimeout)
	defer cancel()
	_, err := e.free(ctx, key, token)
	if err != nil {
		e.log.Warn("release of a connection-bound lock failed; it expires with its lease",
			zap.String("key", key), zap.Duration("lease", e.cfg.BoundLease), zap.Error(err))
	}
	return err
}

type attemptKey struct{}

// WithAttempt binds a Backend.Release or Extend called with the returned
// context to the grant of attempt (Grant.Attempt): the backend releases or
// extends only a hold that grant's attempt was the last to take or
// refresh, and leaves one that a later grant of the same token refreshed
// to its lease (Extend then reports ErrNotHeld). An empty attempt returns
// ctx: any hold of the token.
func WithAttempt(ctx context.Context, attempt string) context.Context {
	if attempt == "" {
		return ctx
	}
	return context.WithValue(ctx, attemptKey{}, attempt)
}

// BoundAttempt is the attempt a Backend.Release or Extend called with ctx
// is bound to (WithAttempt); "" for any hold of the token.
func BoundAttempt(ctx context.Context) string {
	a, _ := ctx.Value(attemptKey{}).(string)
	return a
}
