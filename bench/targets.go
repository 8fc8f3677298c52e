package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// lockTTL is the lease every cycle asks for, as PX 10000 / WithExpiry(10s):
// maxLease, the longest lease the bench lets lockproxy grant.
const lockTTL = maxLease

// cycleFunc takes and releases key once and returns how long taking it
// took; it returns an error unless both steps succeeded.
type cycleFunc func(ctx context.Context, key string) (acquire time.Duration, err error)

// target is one implementation under test.
type target struct {
	name    string
	cycle   cycleFunc
	contend func(key string) contender // a new client of the contended case; nil: none
	pid     int                        // the proxy process it goes through, whose CPU is its proxy cost; 0: none
	close   func() error
}

// newClient is a go-redis client whose pool is not the bottleneck and that
// never retries, so every failure is counted.
func newClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, MaxRetries: -1})
}

// newLockproxyTarget sends LOCK and UNLOCK to the lockproxy at addr, a
// subprocess pid (0: in this process).
func newLockproxyTarget(addr string, pid, poolSize int) *target {
	c := newClient(addr, poolSize)
	contend := func(key string) contender { return newLockproxyContender(addr, key) }
	return &target{name: "lockproxy", cycle: lockproxyCycle(c), contend: contend, close: c.Close, pid: pid}
}

func lockproxyCycle(c *redis.Client) cycleFunc {
	return func(ctx context.Context, key string) (time.Duration, error) {
		start := time.Now()
		token, err := lockproxyLock(ctx, c, key)
		if err != nil {
			return 0, err
		}
		acquire := time.Since(start)
		return acquire, lockproxyUnlock(ctx, c, key, token)
	}
}

// lockproxyLock sends LOCK key PX 10000, followed by extra arguments such
// as WAIT ms, and returns the token. A null reply is errNotAcquired.
func lockproxyLock(ctx context.Context, c *redis.Client, key string, extra ...any) (string, error) {
	args := append([]any{"LOCK", key, "PX", lockTTL.Milliseconds()}, extra...)
	v, err := c.Do(ctx, args...).Slice()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("LOCK: %w (null reply)", errNotAcquired)
	}
	if err != nil {
		return "", fmt.Errorf("LOCK: %w", err)
	}
	if len(v) != 3 {
		return "", fmt.Errorf("LOCK replied %v", v)
	}
	token, ok := v[0].(string)
	if !ok {
		return "", fmt.Errorf("LOCK replied a %T token", v[0])
	}
	return token, nil
}

// lockproxyUnlock sends UNLOCK key token and wants 1 back.
func lockproxyUnlock(ctx context.Context, c *redis.Client, key, token string) error {
	n, err := c.Do(ctx, "UNLOCK", key, token).Int64()
	if err != nil {
		return fmt.Errorf("UNLOCK: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("UNLOCK replied %d", n)
	}
	return nil
}

// newRedisTarget is the plain-Redis baseline: one redis-server, no HA, the
// way most lock code does it: SET key token NX PX 10000, then a Lua
// compare-and-delete; the token is 16 random bytes, as redsync's.
func newRedisTarget(addr string, poolSize int) *target {
	c := newClient(addr, poolSize)
	return &target{name: "redis", cycle: redisCycle(c), close: c.Close}
}

// newTwemproxyTarget is the plain-Redis cycle through twemproxy tw, in
// front of the same redis-server: what one proxy hop costs, with no HA.
func newTwemproxyTarget(tw *proxy, poolSize int) *target {
	c := redis.NewClient(twemproxyOptions(tw.addr, poolSize))
	return &target{name: "twemproxy", cycle: redisCycle(c), close: c.Close, pid: tw.pid}
}

// redisRelease deletes the key only if it still holds the token.
var redisRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func redisCycle(c *redis.Client) cycleFunc {
	return func(ctx context.Context, key string) (time.Duration, error) {
		start := time.Now()
		token, err := randomToken()
		if err != nil {
			return 0, err
		}
		ok, err := c.SetNX(ctx, key, token, lockTTL).Result()
		if err != nil {
			return 0, fmt.Errorf("SET NX: %w", err)
		}
		if !ok {
			return 0, fmt.Errorf("SET NX: %w", errNotAcquired)
		}
		acquire := time.Since(start)
		n, err := redisRelease.Run(ctx, c, []string{key}, token).Int64()
		if err != nil {
			return 0, fmt.Errorf("release: %w", err)
		}
		if n != 1 {
			return 0, fmt.Errorf("release replied %d", n)
		}
		return acquire, nil
	}
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// newRedsyncTarget runs redsync over one go-redis client per node.
func newRedsyncTarget(nodes []string, poolSize int) *target {
	clients := make([]*redis.Client, len(nodes))
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, addr := range nodes {
		clients[i] = newClient(addr, poolSize)
		pools[i] = goredis.NewPool(clients[i])
	}
	rs := redsync.New(pools...)
	contend := func(key string) contender { return newRedsyncContender(rs, key) }
	return &target{name: "redsync", cycle: redsyncCycle(rs), contend: contend, close: closeClients(clients)}
}

func redsyncCycle(rs *redsync.Redsync) cycleFunc {
	return func(ctx context.Context, key string) (time.Duration, error) {
		start := time.Now()
		m := rs.NewMutex(key, redsync.WithExpiry(lockTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return 0, fmt.Errorf("lock: %w", err)
		}
		acquire := time.Since(start)
		return acquire, redsyncUnlock(ctx, m)
	}
}

func redsyncUnlock(ctx context.Context, m *redsync.Mutex) error {
	ok, err := m.UnlockContext(ctx)
	if err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	if !ok {
		return errors.New("unlock: not released on a quorum")
	}
	return nil
}

func closeClients(clients []*redis.Client) func() error {
	return func() error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
}

// contender is one client of the contended case, on one key: it has its
// own connection (lockproxy) or its own mutex (redsync).
type contender interface {
	// lock waits until it holds the key; errNotAcquired when the wait ended
	// without it (lockproxy's WAIT elapsed, redsync ran out of tries).
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
	close() error
}

// errNotAcquired is a lock attempt that ended without the lock and without
// a failure: the key was held by someone else.
var errNotAcquired = errors.New("not acquired")

// waitBound is how long a contended client waits for the lock: WAIT 30000
// for lockproxy. redsync's default retries end well before it.
const waitBound = 30 * time.Second

// waitMargin lets lockproxy's reply to an elapsed WAIT arrive before the
// client's own deadline.
const waitMargin = 5 * time.Second

// lockproxyContender sends LOCK key PX 10000 WAIT 30000 and UNLOCK on a
// connection of its own.
type lockproxyContender struct {
	c     *redis.Client
	key   string
	token string
}

func newLockproxyContender(addr, key string) *lockproxyContender {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1,
		ReadTimeout: waitBound + waitMargin, ContextTimeoutEnabled: true})
	return &lockproxyContender{c: c, key: key}
}

func (l *lockproxyContender) lock(ctx context.Context) error {
	token, err := lockproxyLock(ctx, l.c, l.key, "WAIT", waitBound.Milliseconds())
	l.token = token
	return err
}

func (l *lockproxyContender) unlock(ctx context.Context) error {
	return lockproxyUnlock(ctx, l.c, l.key, l.token)
}

func (l *lockproxyContender) close() error { return l.c.Close() }

// redsyncContender is one redsync mutex with the default retry policy: 32
// tries, 50-250 ms apart.
type redsyncContender struct{ m *redsync.Mutex }

func newRedsyncContender(rs *redsync.Redsync, key string) *redsyncContender {
	return &redsyncContender{m: rs.NewMutex(key, redsync.WithExpiry(lockTTL))}
}

// lock is Lock; running out of tries because the key stayed taken is
// errNotAcquired.
func (r *redsyncContender) lock(ctx context.Context) error {
	err := r.m.LockContext(ctx)
	switch {
	case err == nil:
		return nil
	case lostToHolder(err):
		return fmt.Errorf("lock: %w (%w)", errNotAcquired, err)
	default:
		return fmt.Errorf("lock: %w", err)
	}
}

// lostToHolder tells a redsync Lock that ran out of tries because the key
// stayed taken from one that also failed to reach a node.
func lostToHolder(err error) bool {
	var redisErr *redsync.RedisError
	if errors.As(err, &redisErr) {
		return false
	}
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken)
}

func (r *redsyncContender) unlock(ctx context.Context) error { return redsyncUnlock(ctx, r.m) }

func (r *redsyncContender) close() error { return nil }
