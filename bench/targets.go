package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// lockTTL is the lease every cycle asks for, as PX 30000 / WithExpiry(30s).
const lockTTL = 30 * time.Second

// cycleFunc takes and releases key once; it returns an error unless both
// steps succeeded.
type cycleFunc func(ctx context.Context, key string) error

// target is one implementation under test.
type target struct {
	name  string
	cycle cycleFunc
	close func() error
}

// newClient is a go-redis client whose pool is not the bottleneck and that
// never retries, so every failure is counted.
func newClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, MaxRetries: -1})
}

// newLockproxyTarget sends LOCK and UNLOCK to the lockproxy at addr.
func newLockproxyTarget(addr string, poolSize int) *target {
	c := newClient(addr, poolSize)
	return &target{name: "lockproxy", cycle: lockproxyCycle(c), close: c.Close}
}

func lockproxyCycle(c *redis.Client) cycleFunc {
	return func(ctx context.Context, key string) error {
		token, err := lockproxyLock(ctx, c, key)
		if err != nil {
			return err
		}
		n, err := c.Do(ctx, "UNLOCK", key, token).Int64()
		if err != nil {
			return fmt.Errorf("UNLOCK: %w", err)
		}
		if n != 1 {
			return fmt.Errorf("UNLOCK replied %d", n)
		}
		return nil
	}
}

// lockproxyLock sends LOCK key PX 30000 and returns the token.
func lockproxyLock(ctx context.Context, c *redis.Client, key string) (string, error) {
	v, err := c.Do(ctx, "LOCK", key, "PX", lockTTL.Milliseconds()).Slice()
	if errors.Is(err, redis.Nil) {
		return "", errors.New("LOCK: not acquired (null reply)")
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

// newRedsyncTarget runs redsync over one go-redis client per node.
func newRedsyncTarget(nodes []string, poolSize int) *target {
	clients := make([]*redis.Client, len(nodes))
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, addr := range nodes {
		clients[i] = newClient(addr, poolSize)
		pools[i] = goredis.NewPool(clients[i])
	}
	return &target{name: "redsync", cycle: redsyncCycle(redsync.New(pools...)), close: closeClients(clients)}
}

func redsyncCycle(rs *redsync.Redsync) cycleFunc {
	return func(ctx context.Context, key string) error {
		m := rs.NewMutex(key, redsync.WithExpiry(lockTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		ok, err := m.UnlockContext(ctx)
		if err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		if !ok {
			return errors.New("unlock: not released on a quorum")
		}
		return nil
	}
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
