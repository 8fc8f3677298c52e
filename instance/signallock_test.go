package instance_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// A signal-list lock, as lock libraries outside the catalog build one
// (issue 13): a script takes the lock with SET NX PX; the release script
// deletes it if the token matches and pushes a signal on a list; a waiter
// BLPOPs the list between tries. Neither script is in the catalog, so on
// lockproxy both run on every node, and BLPOP returns as soon as a node
// has the signal.
const (
	signalAcquireScript = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`
	signalReleaseScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('RPUSH', KEYS[2], '1')
  redis.call('PEXPIRE', KEYS[2], 5000)
  return 1
end
return 0`
)

// Bounds of the signal-list lock test.
const (
	signalClients = 3
	signalRounds  = 15                    // grants per client
	signalHold    = 30 * time.Millisecond // how long a client holds the lock: long enough that others wait
	signalWait    = 2 * time.Second       // a waiter's BLPOP timeout, then it tries again
	signalLease   = 30 * time.Second      // never reached: every holder releases
	signalBound   = 2 * time.Minute       // the whole test
	signalSpread  = 30 * time.Millisecond // pause between a client's rounds
)

// TestScriptSignalListLock: three clients take a signal-list lock in turn,
// waiters blocked in BLPOP until the holder's release signals them. First
// on one plain redis-server, then on lockproxy: two instances over three
// redis-servers, the clients spread over both. The checker fails on two
// holders at once; every client gets all its grants, and some waiter is
// woken by a signal rather than by its timeout (a BLPOP that returned an
// element).
func TestScriptSignalListLock(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t, redistest.Options{})
		signalListLock(t, []string{s.Addr()})
	})
	t.Run("lockproxy", func(t *testing.T) {
		nodes := redistest.StartN(t, 3, redistest.Options{})
		a, b := startInstance(t, testConfig(nodes)), startInstance(t, testConfig(nodes))
		signalListLock(t, []string{a.Addr(), b.Addr()})
	})
}

// signalListLock runs the clients, client i on addrs[i%len(addrs)].
func signalListLock(t *testing.T, addrs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), signalBound)
	defer cancel()
	key := uniqueKey(t)
	signal := key + ":signal"
	var holder atomic.Value // the token holding the lock as the clients see it, or ""
	holder.Store("")
	var woken atomic.Int64
	errs := make([]error, signalClients)
	var wg sync.WaitGroup
	for i := range signalClients {
		c := newClient(t, addrs[i%len(addrs)], 2)
		wg.Go(func() {
			for round := range signalRounds {
				token := fmt.Sprintf("client%d-%d", i, round)
				if err := signalAcquire(ctx, c, key, signal, token, &woken); err != nil {
					errs[i] = err
					return
				}
				if !holder.CompareAndSwap("", token) {
					errs[i] = fmt.Errorf("%s granted while %s holds the lock", token, holder.Load())
					return
				}
				time.Sleep(signalHold)
				if !holder.CompareAndSwap(token, "") {
					errs[i] = fmt.Errorf("%s's hold was taken by %s", token, holder.Load())
					return
				}
				n, err := c.Eval(ctx, signalReleaseScript, []string{key, signal}, token).Int()
				if err != nil || n != 1 {
					errs[i] = fmt.Errorf("%s's release: %d %v", token, n, err)
					return
				}
				time.Sleep(signalSpread)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if woken.Load() == 0 {
		t.Fatalf("no waiter was woken by a release's signal in %d grants", signalClients*signalRounds)
	}
	t.Logf("%d grants, %d waits ended by a signal", signalClients*signalRounds, woken.Load())
}

// signalAcquire tries to take key for token until it does, waiting for a
// signal between tries; woken counts the waits a signal ended.
func signalAcquire(ctx context.Context, c *redis.Client, key, signal, token string, woken *atomic.Int64) error {
	for {
		n, err := c.Eval(ctx, signalAcquireScript, []string{key}, token, strconv.FormatInt(signalLease.Milliseconds(), 10)).Int()
		if err != nil {
			return fmt.Errorf("%s's acquire: %w", token, err)
		}
		if n == 1 {
			return nil
		}
		switch v, err := c.BLPop(ctx, signalWait, signal).Result(); {
		case errors.Is(err, redis.Nil): // timed out: try again
		case err != nil:
			return fmt.Errorf("%s's BLPOP: %w", token, err)
		case len(v) == 2 && v[0] == signal:
			woken.Add(1)
		default:
			return fmt.Errorf("%s's BLPOP: %q", token, v)
		}
	}
}
