package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

var _ quorum.Node = (*RedisNode)(nil)

// Defaults for the zero values of RedisOptions.
const (
	DefaultPrefix      = "lockproxy:"
	DefaultPipelines   = 4
	DefaultMaxBatch    = 128
	DefaultDialTimeout = 5 * time.Second
	DefaultTimeout     = 5 * time.Second
)

// RedisOptions configure a RedisNode. Zero values take the defaults noted.
type RedisOptions struct {
	Addr     string // host:port of the node
	Password string // AUTH password; empty for none
	DB       int    // database number; default 0
	// Prefix is prepended to every key lockproxy writes on the node;
	// default "lockproxy:".
	Prefix string
	// PoolSize caps the connections to the node; default Pipelines (each
	// pipeline worker uses one connection at a time).
	PoolSize int
	// Pipelines is the number of pipeline workers, that is of round trips
	// to the node in flight at once; default 4.
	Pipelines int
	// MaxBatch is the most calls sent in one pipeline; default 128.
	MaxBatch int
	// DialTimeout bounds one connection attempt; default 5s. A failed dial
	// is not retried: the quorum layer decides what to do about a dead node.
	DialTimeout time.Duration
	// Timeout caps one round trip to the node, whatever the callers'
	// deadlines; default 5s.
	Timeout time.Duration
}

func (o RedisOptions) withDefaults() RedisOptions {
	o.Prefix = orDefault(o.Prefix, DefaultPrefix)
	o.Pipelines = orDefault(o.Pipelines, DefaultPipelines)
	o.PoolSize = orDefault(o.PoolSize, o.Pipelines)
	o.MaxBatch = orDefault(o.MaxBatch, DefaultMaxBatch)
	o.DialTimeout = orDefault(o.DialTimeout, DefaultDialTimeout)
	o.Timeout = orDefault(o.Timeout, DefaultTimeout)
	return o
}

// orDefault returns v, or def when v is the zero value (or negative).
func orDefault[T int | string | time.Duration](v, def T) T {
	var zero T
	if v <= zero {
		return def
	}
	return v
}

// clientOptions configure go-redis for a node: no retries (a retried script
// may report a wrong outcome, and retrying is the quorum layer's business),
// deadlines taken from the context, and pipelines on the one main pool.
func (o RedisOptions) clientOptions() *redis.Options {
	return &redis.Options{
		Addr:                  o.Addr,
		Password:              o.Password,
		DB:                    o.DB,
		PoolSize:              o.PoolSize,
		PipelinePoolSize:      -1,
		DialTimeout:           o.DialTimeout,
		DialerRetries:         1,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
}

// RedisNode is a quorum.Node over one Redis node. Concurrent calls share
// round trips: they queue for a few pipeline workers, each of which sends
// whatever is queued (up to MaxBatch calls) in one pipeline.
type RedisNode struct {
	addr     string
	prefix   string
	maxBatch int
	timeout  time.Duration
	client   *redis.Client

	calls     chan *call
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
	workers   sync.WaitGroup

	roundTrips atomic.Uint64
	sent       atomic.Uint64
}

// NewRedisNode connects lazily to the node at o.Addr and starts its pipeline
// workers. Close stops them.
func NewRedisNode(o RedisOptions) *RedisNode {
	o = o.withDefaults()
	n := &RedisNode{
		addr:     o.Addr,
		prefix:   o.Prefix,
		maxBatch: o.MaxBatch,
		timeout:  o.Timeout,
		client:   redis.NewClient(o.clientOptions()),
		calls:    make(chan *call, o.Pipelines*o.MaxBatch),
		done:     make(chan struct{}),
	}
	for range o.Pipelines {
		n.workers.Go(n.work)
	}
	return n
}

// Close stops the pipeline workers, fails the calls still waiting with
// ErrClosed and closes the connections. Calling it again returns the first
// result.
func (n *RedisNode) Close() error {
	n.closeOnce.Do(func() {
		close(n.done)
		n.closeErr = n.client.Close() // also fails pipelines in flight
		n.workers.Wait()
	})
	return n.closeErr
}

// String is the node's address.
func (n *RedisNode) String() string { return n.addr }

// Stats counts a node's traffic since it was created.
type Stats struct {
	Calls      uint64 // script calls sent; a NOSCRIPT re-send counts again
	RoundTrips uint64 // pipelines sent
}

// Stats reports the node's traffic counters.
func (n *RedisNode) Stats() Stats {
	return Stats{Calls: n.sent.Load(), RoundTrips: n.roundTrips.Load()}
}

// Acquire runs acquire.lua: take key for h or reset its TTL if h.Token holds
// it, reading the fencing counter in the same step.
func (n *RedisNode) Acquire(ctx context.Context, key string, h engine.Hold) (quorum.Claim, error) {
	v, err := n.eval(ctx, acquireScript, n.keys(key), h.Token, millis(h.TTL), string(h.Mode), h.Name)
	if err != nil {
		return quorum.Claim{}, err
	}
	c, err := claim(v)
	return c, n.wrap(err)
}

// Commit runs commit.lua: raise the fencing counter to at least fence and
// record fence on the lock if token holds it.
func (n *RedisNode) Commit(ctx context.Context, key, token string, fence int64) (bool, error) {
	return n.flag(ctx, commitScript, n.keys(key), token, fence)
}

// Extend runs extend.lua: reset the TTL (rounded up to whole milliseconds)
// of key if token holds it — a zero ttl reuses the lock's own — and record
// mode unless it is empty. It returns the TTL applied, 0 if not held.
func (n *RedisNode) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	v, err := n.eval(ctx, extendScript, n.keys(key)[:1], token, millis(ttl), string(mode))
	if err != nil {
		return 0, err
	}
	ms, ok := v.(int64)
	if !ok || ms < 0 {
		return 0, n.wrap(badReply(extendScript.name, v))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Release runs release.lua: delete key if token holds it. The fencing
// counter stays.
func (n *RedisNode) Release(ctx context.Context, key, token string) (bool, error) {
	return n.flag(ctx, releaseScript, n.keys(key)[:1], token)
}

// Inspect runs inspect.lua: read the entry of key.
func (n *RedisNode) Inspect(ctx context.Context, key string) (quorum.Entry, bool, error) {
	v, err := n.eval(ctx, inspectScript, n.keys(key)[:1])
	if err != nil {
		return quorum.Entry{}, false, err
	}
	e, ok, err := entry(v)
	return e, ok, n.wrap(err)
}

// flag runs a script that answers 1 (true) or 0 (false).
func (n *RedisNode) flag(ctx context.Context, s *script, keys []string, args ...any) (bool, error) {
	v, err := n.eval(ctx, s, keys, args...)
	if err != nil {
		return false, err
	}
	ok, err := flag(s, v)
	return ok, n.wrap(err)
}

// keys are the lock hash and the fencing counter of key on the node.
func (n *RedisNode) keys(key string) []string {
	return []string{n.prefix + "lock:" + key, n.prefix + "fence:" + key}
}

// wrap adds the node's address to err.
func (n *RedisNode) wrap(err error) error {
	if err == nil {
		return nil
	}
	return &NodeError{Addr: n.addr, Err: err}
}

// millis is d in whole milliseconds, rounded up and at least 1: a TTL of 0
// would make PEXPIRE delete the key.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0 // extend.lua: reuse the lock's own ttl
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
