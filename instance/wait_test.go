package instance_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// waitLock runs LOCK ... WAIT in the background; the reply arrives on the
// returned channel.
func waitLock(c *redis.Client, args ...any) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		r, ok, err := lock(context.Background(), c, args...)
		out <- lockResult{r, ok, err}
	}()
	return out
}

type lockResult struct {
	lockReply
	ok  bool
	err error
}

// waiters reads LOCKINFO's waiters for key: 0 when the key is free, -1 on
// an error (polls retry).
func waiters(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), "LOCKINFO", key).Result()
	switch v := v.(type) {
	case map[any]any:
		n, _ := v["waiters"].(int64)
		return n
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if v[i] == "waiters" {
				return v[i+1].(int64)
			}
		}
	}
	if err == redis.Nil {
		return 0
	}
	return -1
}

// recv fails the test unless the waiter got the lock within d.
func recv(t *testing.T, ch <-chan lockResult, d time.Duration, what string) lockReply {
	t.Helper()
	select {
	case r := <-ch:
		if !r.ok || r.err != nil {
			t.Fatalf("%s: granted=%v err=%v", what, r.ok, r.err)
		}
		return r.lockReply
	case <-time.After(d):
		t.Fatalf("%s: not granted within %v", what, d)
	}
	return lockReply{}
}

// TestWaitHandoff: a waiter gets the lock as soon as the holder releases
// it, long before the holder's lease would have run out — through one
// instance, and when holder and waiter use two different instances.
func TestWaitHandoff(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		one, two := startInstance(t, cfg), startInstance(t, cfg)
		for _, tc := range []struct {
			name            string
			holder, waiting string
		}{{"one instance", one.Addr(), one.Addr()}, {"two instances", one.Addr(), two.Addr()}} {
			t.Run(tc.name, func(t *testing.T) {
				h, w := newClient(t, tc.holder, 2), newClient(t, tc.waiting, 2)
				key := uniqueKey(t)
				g := mustLock(t, h, key, "PX", 60000)
				got := waitLock(w, key, "PX", 5000, "WAIT", 30000)
				eventually(t, 5*time.Second, "the waiter is queued", func() bool { return waiters(t, w, key) == 1 })
				if _, err := h.Do(context.Background(), "UNLOCK", key, g.token).Result(); err != nil {
					t.Fatal(err)
				}
				if r := recv(t, got, 5*time.Second, "handoff"); r.fence <= g.fence { // a failed attempt may skip numbers
					t.Fatalf("fence %d after %d", r.fence, g.fence)
				}
			})
		}
	})
}

// TestWaitFIFO: 20 clients of one instance wait in turn; each release goes
// to the one that waited longest.
func TestWaitFIFO(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		key := uniqueKey(t)
		holder := newClient(t, in.Addr(), 2)
		g := mustLock(t, holder, key, "PX", 60000)
		const n = 20
		order := make(chan int, n)
		var wg sync.WaitGroup
		for i := range n {
			c := newClient(t, in.Addr(), 2)
			wg.Go(func() { waitInTurn(t, c, key, i, order) })
			eventually(t, 5*time.Second, "waiter queued", func() bool { return waiters(t, holder, key) == int64(i+1) })
		}
		holder.Do(context.Background(), "UNLOCK", key, g.token)
		wg.Wait()
		inOrder(t, order, n)
	})
}

// waitInTurn is waiter i: it waits for key, reports its number on order
// once granted, and releases the key.
func waitInTurn(t *testing.T, c *redis.Client, key string, i int, order chan<- int) {
	r, ok, err := lock(context.Background(), c, key, "PX", 60000, "WAIT", 60000)
	if !ok || err != nil {
		t.Errorf("waiter %d: %v %v", i, ok, err)
		return
	}
	order <- i
	c.Do(context.Background(), "UNLOCK", key, r.token)
}

// inOrder closes order, the waiters' numbers in the order they were
// granted, and checks it is 0, 1, ..., n-1.
func inOrder(t *testing.T, order chan int, n int) {
	t.Helper()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
		want++
	}
	if want != n {
		t.Fatalf("%d of %d waiters granted", want, n)
	}
}

// TestWaitTimeout: a WAIT that elapses answers null, on time, and leaves
// no waiter behind.
func TestWaitTimeout(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		c := newClient(t, in.Addr(), 3)
		key := uniqueKey(t)
		mustLock(t, c, key, "PX", 60000)
		other := newClient(t, in.Addr(), 3)
		start := time.Now()
		_, ok, err := lock(context.Background(), other, key, "PX", 1000, "WAIT", 300)
		if ok || err != nil {
			t.Fatalf("granted=%v err=%v", ok, err)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Fatalf("WAIT 300 answered after %v", took)
		}
		if n := waiters(t, c, key); n != 0 {
			t.Fatalf("%d waiters left", n)
		}
	})
}

// TestWait0WakesWhenHolderIsKilled: WAIT 0 blocks until the holder's
// connection-bound lock is released because its client process was killed.
func TestWait0WakesWhenHolderIsKilled(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		key := uniqueKey(t)
		child := startHolder(t, in.Addr(), key)
		w := newClient(t, in.Addr(), 2)
		got := waitLock(w, key, "PX", 5000, "WAIT", 0)
		eventually(t, 5*time.Second, "the waiter is queued", func() bool { return waiters(t, w, key) == 1 })
		child.Process.Signal(syscall.SIGKILL)
		recv(t, got, 5*time.Second, "WAIT 0 after the holder was killed")
	})
}

// TestWaiterKilled: a waiter whose connection dies stops waiting at once;
// the next waiter gets the lock; no goroutine is left behind.
func TestWaiterKilled(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		key := uniqueKey(t)
		h := newClient(t, in.Addr(), 2)
		g := mustLock(t, h, key, "PX", 60000)
		base := runtime.NumGoroutine()
		doomed := dialRaw(t, in.Addr())
		doomed.send(fmt.Sprintf("*6\r\n$4\r\nLOCK\r\n$%d\r\n%s\r\n$2\r\nPX\r\n$4\r\n5000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n", len(key), key))
		eventually(t, 5*time.Second, "first waiter queued", func() bool { return waiters(t, h, key) == 1 })
		next := newClient(t, in.Addr(), 2)
		got := waitLock(next, key, "PX", 5000, "WAIT", 30000)
		eventually(t, 5*time.Second, "second waiter queued", func() bool { return waiters(t, h, key) == 2 })
		doomed.c.Close()
		eventually(t, 5*time.Second, "the dead waiter leaves the queue", func() bool { return waiters(t, h, key) == 1 })
		h.Do(context.Background(), "UNLOCK", key, g.token)
		recv(t, got, 5*time.Second, "the next waiter")
		eventually(t, 5*time.Second, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base+2 })
	})
}

// TestWaitWithoutNotifications: with the nodes' subscription connections
// killed over and over, a waiter still gets the lock once the holder's
// lease runs out (nothing is published for an expiry) — within the lease
// plus the retry, never a hang.
func TestWaitWithoutNotifications(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	in := startInstance(t, testConfig(nodes))
	key := uniqueKey(t)
	h, w := newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2)
	mustLock(t, h, key, "PX", 800)
	stop := make(chan struct{})
	var killer sync.WaitGroup
	killer.Go(func() {
		raws := make([]*redis.Client, len(nodes))
		for i, n := range nodes {
			raws[i] = redis.NewClient(&redis.Options{Addr: n.Addr()})
			defer raws[i].Close()
		}
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, r := range raws {
				r.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub")
			}
		}
	})
	defer func() { close(stop); killer.Wait() }()
	start := time.Now()
	recv(t, waitLock(w, key, "PX", 5000, "WAIT", 10000), 5*time.Second, "after the lease ran out")
	t.Logf("granted %v after the 800 ms lease was taken", time.Since(start).Round(time.Millisecond))
}

// TestWaitOrderAcrossInstances: waiters arrive in turn at two instances;
// each release goes to the waiter that arrived first, whichever instance it
// waits in.
//
// Arrival across instances is what the servers record. The first waiter
// of each instance takes a place in the key's line after it is queued
// there (LOCKINFO's waiters), on its first try, and ZooKeeper orders the
// places by when it creates them: a loaded instance can make its place
// later than the next waiter's, sent to the other instance once the first
// was queued. So the next waiter asks only once the place of the one
// before is recorded. A later waiter of an instance gets its place from
// the grant before its own.
func TestWaitOrderAcrossInstances(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		ins := []string{startInstance(t, cfg).Addr(), startInstance(t, cfg).Addr()}
		key := uniqueKey(t)
		probe := []*redis.Client{newClient(t, ins[0], 2), newClient(t, ins[1], 2)}
		line := lineReader(t, cfg)
		g := mustLock(t, probe[0], key, "PX", 60000)
		const n = 10
		order := make(chan int, n)
		var wg sync.WaitGroup
		for i := range n {
			c := newClient(t, ins[i%2], 2)
			wg.Go(func() { waitInTurn(t, c, key, i, order) })
			eventually(t, 5*time.Second, "waiter queued", func() bool { return waiters(t, probe[i%2], key) == int64(i/2+1) })
			if i < len(ins) { // the first in its instance
				eventually(t, 10*time.Second, "its place in line recorded", func() bool { return line(key) == int64(i+1) })
			}
		}
		probe[0].Do(context.Background(), "UNLOCK", key, g.token)
		wg.Wait()
		inOrder(t, order, n)
	})
}

// TestWaitSafetyUnderFaults: up to 400 grants (at least 100) of one key taken by waiting
// (LOCK ... WAIT) through two instances while one node is killed and
// restarted, another paused past the node timeout, and a third killed and
// restarted: never two holders at once, every fence above the last.
func TestWaitSafetyUnderFaults(t *testing.T) {
	check := grantUnderFaults(t, 400, 100, waitGrantOnce)
	t.Logf("%d waited grants, last fence %d, through 3 node faults", check.count(), check.last)
}

// waitGrantOnce waits for the lock (up to 2 s), checks the grant and
// releases it. NOQUORUM or a lapsed wait during a fault: try again.
func waitGrantOnce(ctx context.Context, c *redis.Client, key string, check *grantChecker) error {
	g, ok, err := lock(ctx, c, key, "PX", 1000, "WAIT", 2000)
	if err != nil || !ok {
		return nil
	}
	if err := check.enter(g.fence); err != nil {
		return err
	}
	time.Sleep(200 * time.Microsecond) // hold it: a second holder would overlap
	check.leave()
	c.Do(ctx, "UNLOCK", key, g.token) // NOQUORUM during a fault: the lease expires
	return nil
}
