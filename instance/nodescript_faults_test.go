package instance_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// holdInterval is one grant of a script-run lock as its holder saw it: from
// the reply that granted it to the moment the holder stopped relying on it
// (its release began, or its lease ran out, whichever came first).
type holdInterval struct {
	owner      string
	from, till time.Time
}

// TestScriptLockExclusiveUnderFaults: two lockproxy instances over the
// same three redis-servers; a client on each takes and releases the
// reentrant hash lock (a script outside the catalog) in a bounded loop
// while one node is killed and restarted and another is paused
// (SIGSTOP/SIGCONT). The restart rule is on (redlock.max_lease_ms above
// the script's TTL), as it must be for a node that restarts empty. The
// checker fails on two holders at once: no two grants' intervals overlap.
func TestScriptLockExclusiveUnderFaults(t *testing.T) {
	const ttl = 2000 * time.Millisecond
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Redlock.MaxLeaseMS = 3000
	cfg.Legacy.ScriptTimeLimitMS = 1000
	addrs := []string{startInstance(t, cfg).Addr(), startInstance(t, cfg).Addr()}
	key := uniqueKey(t)

	// The restart rule counts fresh nodes only once max_lease_ms passed.
	probe := newClient(t, addrs[0], 2)
	eventually(t, 60*time.Second, "the nodes are counted", func() bool {
		return probe.Eval(context.Background(), pttlIfHeldScript, []string{key}, "x").Err() == nil
	})

	stop := make(chan struct{})
	result := make(chan []holdInterval, 1)
	go func() { result <- runHolders(t, addrs, reentrantLockScript, key, ttl, stop) }()

	faults := func() {
		time.Sleep(2 * time.Second)
		if err := nodes[0].Kill(); err != nil {
			t.Error(err)
			return
		}
		time.Sleep(time.Second)
		if err := nodes[0].Restart(); err != nil {
			t.Error(err)
			return
		}
		time.Sleep(5 * time.Second) // the restarted node is counted again after max_lease_ms
		if err := nodes[1].Pause(); err != nil {
			t.Error(err)
			return
		}
		time.Sleep(2 * time.Second)
		if err := nodes[1].Resume(); err != nil {
			t.Error(err)
		}
		time.Sleep(3 * time.Second)
	}
	faults()
	close(stop)
	held := <-result
	if a, b, ok := firstOverlap(held); ok {
		t.Fatalf("two holders at once: %s from %v till %v, %s from %v", a.owner, a.from.Format("15:04:05.000"),
			a.till.Format("15:04:05.000"), b.owner, b.from.Format("15:04:05.000"))
	}
	owners := map[string]int{}
	for _, h := range held {
		owners[h.owner]++
	}
	t.Logf("%d grants: %v", len(held), owners)
	if len(owners) != 2 || len(held) < 20 {
		t.Fatalf("too few grants to say anything: %v", owners)
	}
}

// runHolders runs a client on each of addrs taking and releasing key with
// lockScript (and reentrantUnlockScript) until stop is closed or 2,000
// tries each, and returns every grant's interval.
func runHolders(t *testing.T, addrs []string, lockScript, key string, ttl time.Duration, stop <-chan struct{}) []holdInterval {
	var mu sync.Mutex
	var held []holdInterval
	var wg sync.WaitGroup
	for i, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
		t.Cleanup(func() { c.Close() })
		owner := "owner-" + strconv.Itoa(i)
		wg.Go(func() {
			for range 2000 {
				select {
				case <-stop:
					return
				default:
				}
				if h, ok := holdOnce(c, lockScript, key, owner, ttl); ok {
					mu.Lock()
					held = append(held, h)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return held
}

// firstOverlap finds two grants to different owners whose intervals
// overlap.
func firstOverlap(held []holdInterval) (holdInterval, holdInterval, bool) {
	held = slices.Clone(held)
	slices.SortFunc(held, func(a, b holdInterval) int { return a.from.Compare(b.from) })
	for i := 1; i < len(held); i++ {
		for j := range i {
			if held[j].owner != held[i].owner && held[i].from.Before(held[j].till) {
				return held[j], held[i], true
			}
		}
	}
	return holdInterval{}, holdInterval{}, false
}

// TestScriptLockCheckerCatchesDoubleGrants: the checker of the test above
// fails on a lock script that grants everyone (a plain Redis, two
// clients): it can fail.
func TestScriptLockCheckerCatchesDoubleGrants(t *testing.T) {
	const grantsAll = `redis.call('HINCRBY', KEYS[1], ARGV[1], 1) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1`
	addr := redistest.Start(t, redistest.Options{}).Addr()
	stop := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop) })
	held := runHolders(t, []string{addr, addr}, grantsAll, uniqueKey(t), 2*time.Second, stop)
	if _, _, ok := firstOverlap(held); !ok {
		t.Fatalf("%d grants of a lock that grants everyone, and no two overlap", len(held))
	}
}

// holdOnce tries the lock once and, when granted, holds it a moment and
// releases it. The interval ends when the release begins, or earlier when
// the lease (less 1% and 2 ms of drift) ran out since the acquire was sent.
func holdOnce(c *redis.Client, lockScript, key, owner string, ttl time.Duration) (holdInterval, bool) {
	ctx := context.Background()
	sent := time.Now()
	n, err := c.Eval(ctx, lockScript, []string{key}, owner, ttl.Milliseconds()).Int64()
	granted := time.Now()
	if err != nil || n != 1 {
		time.Sleep(2 * time.Millisecond)
		return holdInterval{}, false
	}
	time.Sleep(5 * time.Millisecond)
	end := time.Now()
	if lease := sent.Add(ttl - ttl/100 - 2*time.Millisecond); lease.Before(end) {
		end = lease
	}
	// A failed release leaves the lock to expire: the interval ends anyway.
	_ = c.Eval(ctx, reentrantUnlockScript, []string{key}, owner).Err()
	return holdInterval{owner: owner, from: granted, till: end}, true
}
