package instance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// compatClient is a go-redis client of addr with the library's defaults, as
// a user of the lock libraries would make it (RESP3 handshake included).
func compatClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// compatWantHolder fails the test unless GET key answers token.
func compatWantHolder(t *testing.T, c *redis.Client, key, token string) {
	t.Helper()
	got, err := c.Get(compatCtx(t), key).Result()
	if err != nil || got != token {
		t.Fatalf("GET %s = %q, %v; want the holder's token %q", key, got, err, token)
	}
}

// compatWantFree fails the test unless GET key answers null.
func compatWantFree(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	got, err := c.Get(compatCtx(t), key).Result()
	if err != redis.Nil {
		t.Fatalf("GET %s = %q, %v; want null (no holder)", key, got, err)
	}
}

// compatWantPTTL fails the test unless PTTL key is in (lo, hi].
func compatWantPTTL(t *testing.T, c *redis.Client, key string, lo, hi time.Duration) {
	t.Helper()
	got, err := c.PTTL(compatCtx(t), key).Result()
	if err != nil || got <= lo || got > hi {
		t.Fatalf("PTTL %s = %v, %v; want in (%v, %v]", key, got, err, lo, hi)
	}
}

// TestCompatRedsync runs the checklist with github.com/go-redsync/redsync/v4
// (goredis/v9 pool, one pool: the address is the whole cluster to redsync).
// redsync takes the lock with go-redis's SetNX, which sends "set k v ex 8 nx"
// when the expiry is whole seconds and "px" otherwise, and sends its own
// scripts with EVALSHA, then EVAL on NOSCRIPT: compare-and-delete (answers -1
// when the key is gone; also sent after every refused acquire) and
// compare-and-PEXPIRE.
func TestCompatRedsync(t *testing.T) {
	compatTargets(t, func(t *testing.T, addr string) {
		// Another owner is another client (its own connections).
		c, c2 := compatClient(t, addr), compatClient(t, addr)
		rs, rs2 := redsync.New(goredis.NewPool(c)), redsync.New(goredis.NewPool(c2))
		lockNow := func(t *testing.T, rs *redsync.Redsync, key string, opts ...redsync.Option) *redsync.Mutex {
			t.Helper()
			m := rs.NewMutex(key, append([]redsync.Option{redsync.WithTries(1)}, opts...)...)
			if err := m.LockContext(compatCtx(t)); err != nil {
				t.Fatalf("Lock %s: %v", key, err)
			}
			return m
		}
		wantTaken := func(t *testing.T, what string, err error) {
			t.Helper()
			var taken *redsync.ErrTaken
			if !errors.As(err, &taken) {
				t.Fatalf("%s: err = %v; want redsync.ErrTaken (lock held by another owner)", what, err)
			}
		}

		t.Run("1_acquire", func(t *testing.T) {
			key := uniqueKey(t)
			m := lockNow(t, rs, key, redsync.WithExpiry(10*time.Second))
			compatWantHolder(t, c, key, m.Value())
			compatWantPTTL(t, c, key, 0, 10*time.Second)
		})
		t.Run("2_second_owner_refused", func(t *testing.T) {
			key := uniqueKey(t)
			m := lockNow(t, rs, key)
			other := rs2.NewMutex(key, redsync.WithTries(1))
			wantTaken(t, "second owner's Lock", other.LockContext(compatCtx(t)))
			compatWantHolder(t, c, key, m.Value())
		})
		t.Run("3_extend", func(t *testing.T) {
			key := uniqueKey(t)
			m := lockNow(t, rs, key, redsync.WithExpiry(10*time.Second))
			if ok, err := m.ExtendContext(compatCtx(t)); !ok || err != nil {
				t.Fatalf("owner's Extend = %v, %v; want true, nil", ok, err)
			}
			// The same owner (WithValue: its token) extends to a longer expiry:
			// the new lease shows in PTTL.
			longer := rs.NewMutex(key, redsync.WithExpiry(30*time.Second), redsync.WithValue(m.Value()))
			if ok, err := longer.ExtendContext(compatCtx(t)); !ok || err != nil {
				t.Fatalf("owner's Extend to 30s = %v, %v; want true, nil", ok, err)
			}
			compatWantPTTL(t, c, key, 20*time.Second, 30*time.Second)
			// Another token's Extend is refused and changes nothing.
			other := rs2.NewMutex(key, redsync.WithExpiry(time.Second), redsync.WithValue("not-the-owner"))
			if ok, err := other.ExtendContext(compatCtx(t)); ok {
				t.Fatalf("non-owner's Extend = %v, %v; want false", ok, err)
			}
			compatWantPTTL(t, c, key, 20*time.Second, 30*time.Second)
			compatWantHolder(t, c, key, m.Value())
		})
		t.Run("4_non_owner_release_refused", func(t *testing.T) {
			key := uniqueKey(t)
			m := lockNow(t, rs, key)
			other := rs2.NewMutex(key, redsync.WithValue("not-the-owner"))
			ok, err := other.UnlockContext(compatCtx(t))
			if ok {
				t.Fatalf("non-owner's Unlock = true, %v; want false", err)
			}
			wantTaken(t, "non-owner's Unlock", err)
			compatWantHolder(t, c, key, m.Value())
			third := rs2.NewMutex(key, redsync.WithTries(1))
			wantTaken(t, "third owner's Lock after the refused release", third.LockContext(compatCtx(t)))
		})
		t.Run("5_owner_release", func(t *testing.T) {
			key := uniqueKey(t)
			m := lockNow(t, rs, key)
			if ok, err := m.UnlockContext(compatCtx(t)); !ok || err != nil {
				t.Fatalf("owner's Unlock = %v, %v; want true, nil", ok, err)
			}
			compatWantFree(t, c, key)
			next := lockNow(t, rs2, key)
			compatWantHolder(t, c, key, next.Value())
		})
		t.Run("6_blocking_acquire", func(t *testing.T) {
			key := uniqueKey(t)
			holder := lockNow(t, rs, key, redsync.WithExpiry(10*time.Second))
			done := compatReleaseLater(func() error {
				if ok, err := holder.Unlock(); !ok {
					return errors.Join(errors.New("Unlock returned false"), err)
				}
				return nil
			})
			waiter := rs2.NewMutex(key, redsync.WithTries(1000), redsync.WithRetryDelay(20*time.Millisecond))
			err := waiter.LockContext(compatCtx(t))
			got := time.Now()
			released := compatWaitRelease(t, done)
			if err != nil {
				t.Fatalf("waiter's Lock (retrying every 20ms): %v", err)
			}
			if got.Before(released) {
				t.Fatalf("waiter acquired %v before the holder released", released.Sub(got))
			}
			compatWantHolder(t, c, key, waiter.Value())
		})
		t.Run("7_lease_expires", func(t *testing.T) {
			key := uniqueKey(t)
			start := time.Now()
			short := lockNow(t, rs, key, redsync.WithExpiry(compatShortTTL))
			other := rs2.NewMutex(key, redsync.WithTries(1))
			err := other.LockContext(compatCtx(t))
			if err == nil && time.Since(start) < compatShortTTL {
				t.Fatalf("another owner acquired %v after a %v lease was taken, before it expired", time.Since(start), compatShortTTL)
			}
			wantTaken(t, "another owner's Lock before the lease expires", err)
			ctx := compatCtx(t)
			eventually(t, compatWaitBound, "another owner acquires after the lease expires", func() bool {
				return other.LockContext(ctx) == nil
			})
			if d := time.Since(start); d < compatShortTTL {
				t.Fatalf("another owner acquired after %v, before the %v lease expired", d, compatShortTTL)
			}
			compatWantHolder(t, c, key, other.Value())
			// The expired owner can no longer release.
			if ok, err := short.UnlockContext(compatCtx(t)); ok {
				t.Fatalf("expired owner's Unlock = true, %v; want false", err)
			}
			compatWantHolder(t, c, key, other.Value())
		})
	})
}

// TestCompatRedislock runs the checklist with github.com/bsm/redislock. Every
// operation is a script sent with EVALSHA, then EVAL on NOSCRIPT: an obtain
// script (SET NX PX, or re-obtain when the value starts with the same token),
// compare-and-PEXPIRE, compare-and-DEL, compare-and-PTTL.
func TestCompatRedislock(t *testing.T) {
	compatTargets(t, func(t *testing.T, addr string) {
		// Another owner is another client (its own connections).
		c, c2 := compatClient(t, addr), compatClient(t, addr)
		rl, rl2 := redislock.New(c), redislock.New(c2)
		obtain := func(t *testing.T, rl *redislock.Client, key string, ttl time.Duration) *redislock.Lock {
			t.Helper()
			l, err := rl.Obtain(compatCtx(t), key, ttl, nil)
			if err != nil {
				t.Fatalf("Obtain %s: %v", key, err)
			}
			return l
		}
		wantNotObtained := func(t *testing.T, what string, key string) {
			t.Helper()
			l, err := rl2.Obtain(compatCtx(t), key, 10*time.Second, nil)
			if err != redislock.ErrNotObtained {
				t.Fatalf("%s: Obtain = %v, %v; want redislock.ErrNotObtained", what, l, err)
			}
		}
		wantTTL := func(t *testing.T, l *redislock.Lock, lo, hi time.Duration) {
			t.Helper()
			d, err := l.TTL(compatCtx(t))
			if err != nil || d <= lo || d > hi {
				t.Fatalf("lock.TTL = %v, %v; want in (%v, %v]", d, err, lo, hi)
			}
		}

		t.Run("1_acquire", func(t *testing.T) {
			key := uniqueKey(t)
			l := obtain(t, rl, key, 10*time.Second)
			compatWantHolder(t, c, key, l.Token())
			wantTTL(t, l, 0, 10*time.Second)
		})
		t.Run("2_second_owner_refused", func(t *testing.T) {
			key := uniqueKey(t)
			l := obtain(t, rl, key, 10*time.Second)
			wantNotObtained(t, "second owner", key)
			compatWantHolder(t, c, key, l.Token())
		})
		t.Run("3_extend", func(t *testing.T) {
			key := uniqueKey(t)
			l := obtain(t, rl, key, 10*time.Second)
			if err := l.Refresh(compatCtx(t), 30*time.Second, nil); err != nil {
				t.Fatalf("owner's Refresh to 30s: %v", err)
			}
			wantTTL(t, l, 20*time.Second, 30*time.Second)
			compatWantPTTL(t, c, key, 20*time.Second, 30*time.Second)
		})
		t.Run("4_non_owner_release_refused", func(t *testing.T) {
			// redislock hands out a Lock only to the owner, so the non-owner
			// is the realistic one: a holder whose lease ran out and whose key
			// another owner has since obtained.
			key := uniqueKey(t)
			stale := obtain(t, rl, key, compatShortTTL)
			var owner *redislock.Lock
			ctx := compatCtx(t)
			eventually(t, compatWaitBound, "another owner obtains after the first lease expires", func() bool {
				l, err := rl2.Obtain(ctx, key, 10*time.Second, nil)
				owner = l
				return err == nil
			})
			if err := stale.Release(compatCtx(t)); err != redislock.ErrLockNotHeld {
				t.Fatalf("non-owner's Release = %v; want redislock.ErrLockNotHeld", err)
			}
			if err := stale.Refresh(compatCtx(t), 10*time.Second, nil); err != redislock.ErrNotObtained {
				t.Fatalf("non-owner's Refresh = %v; want redislock.ErrNotObtained", err)
			}
			compatWantHolder(t, c, key, owner.Token())
			wantNotObtained(t, "third owner after the refused release", key)
			wantTTL(t, owner, 0, 10*time.Second)
		})
		t.Run("5_owner_release", func(t *testing.T) {
			key := uniqueKey(t)
			l := obtain(t, rl, key, 10*time.Second)
			if err := l.Release(compatCtx(t)); err != nil {
				t.Fatalf("owner's Release: %v", err)
			}
			compatWantFree(t, c, key)
			if err := l.Release(compatCtx(t)); err != redislock.ErrLockNotHeld {
				t.Fatalf("second Release = %v; want redislock.ErrLockNotHeld", err)
			}
			next := obtain(t, rl2, key, 10*time.Second)
			compatWantHolder(t, c, key, next.Token())
		})
		t.Run("6_blocking_acquire", func(t *testing.T) {
			key := uniqueKey(t)
			holder := obtain(t, rl, key, 10*time.Second)
			done := compatReleaseLater(func() error { return holder.Release(compatCtx(t)) })
			waiter, err := rl2.Obtain(compatCtx(t), key, 10*time.Second,
				&redislock.Options{RetryStrategy: redislock.LinearBackoff(20 * time.Millisecond)})
			got := time.Now()
			released := compatWaitRelease(t, done)
			if err != nil {
				t.Fatalf("waiter's Obtain (retrying every 20ms): %v", err)
			}
			if got.Before(released) {
				t.Fatalf("waiter obtained %v before the holder released", released.Sub(got))
			}
			compatWantHolder(t, c, key, waiter.Token())
		})
		t.Run("7_lease_expires", func(t *testing.T) {
			key := uniqueKey(t)
			start := time.Now()
			short := obtain(t, rl, key, compatShortTTL)
			l, err := rl2.Obtain(compatCtx(t), key, 10*time.Second, nil)
			if err == nil && time.Since(start) < compatShortTTL {
				t.Fatalf("another owner obtained %v after a %v lease was taken, before it expired", time.Since(start), compatShortTTL)
			}
			if err != redislock.ErrNotObtained {
				t.Fatalf("another owner before the lease expires: Obtain = %v, %v; want redislock.ErrNotObtained", l, err)
			}
			var next *redislock.Lock
			ctx := compatCtx(t)
			eventually(t, compatWaitBound, "another owner obtains after the lease expires", func() bool {
				l, err := rl2.Obtain(ctx, key, 10*time.Second, nil)
				next = l
				return err == nil
			})
			if d := time.Since(start); d < compatShortTTL {
				t.Fatalf("another owner obtained after %v, before the %v lease expired", d, compatShortTTL)
			}
			compatWantHolder(t, c, key, next.Token())
			if err := short.Release(compatCtx(t)); err != redislock.ErrLockNotHeld {
				t.Fatalf("expired owner's Release = %v; want redislock.ErrLockNotHeld", err)
			}
			compatWantHolder(t, c, key, next.Token())
		})
	})
}
