package upstream

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

const defaultChannel = "lockproxy:released"

// TestReleasePublishes: a release publishes the bare key once on the
// prefix's channel; a release that deletes nothing publishes nothing.
func TestReleasePublishes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx, raw := testCtx(t), rawClient(t, addr)
		ps := rawSubscribe(t, raw, defaultChannel, "x/released")
		n, other := newNode(t, RedisOptions{Addr: addr}), newNode(t, RedisOptions{Addr: addr, Prefix: "x/"})
		const key = "user:42 lock"
		mustAcquire(t, n, "alone", hold("a", time.Minute))
		mustRelease(t, n, "alone", "a", true) // nobody waits: nothing to announce
		mustAcquire(t, n, "taken", hold("a", time.Minute))
		w := waiting("w", "w", time.Now())
		if c, err := n.Acquire(ctx, "taken", w); err != nil || c.State != quorum.Taken {
			t.Fatal(c, err)
		}
		mustRelease(t, n, "taken", "b", false) // wrong token, while someone waits: nothing
		releaseWhileWaited(t, n, key)
		mustRelease(t, n, key, "a", false) // already free
		mustRelease(t, n, "never-held", "a", false)
		releaseWhileWaited(t, other, "k")
		// The releasing instance wakes its own first waiters in turn: when
		// only they are in line, nothing is published; with anyone else in
		// line (o, another instance's), it is.
		for i, c := range []struct{ line, mine []string }{
			{[]string{"w1"}, []string{"w1"}},
			{[]string{"w1", "w2"}, []string{"w1"}}, // published
			{[]string{"w1", "w2"}, []string{"w1", "w2"}},
			{[]string{"w1", "o"}, []string{"w1", "w2"}},       // published
			{[]string{"w1", "w2", "o"}, []string{"w1", "w2"}}, // published
			{[]string{"w2"}, []string{"w1", "w2"}},
			{[]string{"o"}, nil}, // published
		} {
			k := fmt.Sprint("local", i)
			mustAcquire(t, n, k, hold("a", time.Minute))
			for _, id := range c.line {
				if c, err := n.Acquire(ctx, k, waiting(id, id, time.Now())); err != nil || c.State != quorum.Taken {
					t.Fatal(c, err)
				}
			}
			var mine []engine.Waiter
			for _, id := range c.mine {
				mine = append(mine, engine.Waiter{ID: id})
			}
			if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: k, Token: "a", Line: mine}); r.Err != nil || !r.OK {
				t.Fatalf("release of %s: %+v", k, r)
			}
		}
		if err := raw.Publish(ctx, defaultChannel, "end").Err(); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{defaultChannel + " 1:a" + key, "x/released 1:ak", defaultChannel + " 1:alocal1", defaultChannel + " 1:alocal3", defaultChannel + " 1:alocal4", defaultChannel + " 1:alocal6", defaultChannel + " end"} {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Channel + " " + m.Payload; got != want {
				t.Errorf("message %q, want %q", got, want)
			}
		}
	})
}

// TestSubscriptionDelivers: notifications arrive in order, only the
// subscription's prefix's.
func TestSubscriptionDelivers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		got := make(chan string, 1000)
		sub := newSubscription(t, RedisOptions{Addr: addr}, got, nil, DefaultPingAfter)
		mustReady(t, sub)
		n, other := newNode(t, RedisOptions{Addr: addr}), newNode(t, RedisOptions{Addr: addr, Prefix: "other:"})
		releaseWhileWaited(t, other, "ignored")
		const keys = 100
		for i := range keys {
			releaseWhileWaited(t, n, fmt.Sprint("k", i))
		}
		if err := rawClient(t, addr).Publish(testCtx(t), defaultChannel, "0:end").Err(); err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if k := next(t, got); k != fmt.Sprint("k", i) {
				t.Fatalf("notification %d = %q, want k%d", i, k, i)
			}
		}
		if k := next(t, got); k != "end" {
			t.Errorf("notification after the releases = %q, want end", k)
		}
	})
}

// TestSubscriptionSurvivesClientKill: after the node drops the subscriber's
// connection, it subscribes again by itself, and logs the outage once.
func TestSubscriptionSurvivesClientKill(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	core, logs := observer.New(zapcore.DebugLevel)
	got := make(chan string, 1000)
	sub := newSubscription(t, RedisOptions{Addr: s.Addr()}, got, zap.New(core), DefaultPingAfter)
	mustReady(t, sub)
	n, raw := newNode(t, RedisOptions{Addr: s.Addr()}), rawClient(t, s.Addr())
	releaseAndExpect(t, n, got, "before")
	for round := range 3 {
		killed, err := raw.ClientKillByFilter(testCtx(t), "TYPE", "pubsub").Result()
		if err != nil || killed != 1 {
			t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 killed", killed, err)
		}
		deliversAgain(t, raw, got)
		releaseAndExpect(t, n, got, fmt.Sprint("after-kill-", round))
	}
	if lost := logs.FilterMessageSnippet("connection failed").FilterLevelExact(zapcore.InfoLevel).Len(); lost != 3 {
		t.Errorf("%d outages logged at info, want 3:\n%v", lost, logs.All())
	}
	if back := logs.FilterMessageSnippet("subscribed again").FilterLevelExact(zapcore.InfoLevel).Len(); back != 3 {
		t.Errorf("%d recoveries logged at info, want 3:\n%v", back, logs.All())
	}
	if logs.Len() > 10 {
		t.Errorf("%d log entries for 3 outages:\n%v", logs.Len(), logs.All())
	}
}

// TestSubscriptionSurvivesRestart: after the node dies and comes back on the
// same address, the subscription delivers again.
func TestSubscriptionSurvivesRestart(t *testing.T) {
	for _, b := range []struct {
		name  string
		start func(t *testing.T) (addr string, kill, restart func() error)
	}{
		{"redis", func(t *testing.T) (string, func() error, func() error) {
			s := redistest.Start(t, redistest.Options{})
			return s.Addr(), s.Kill, s.Restart
		}},
		{"miniredis", func(t *testing.T) (string, func() error, func() error) {
			m := startEmbedded(t, 1).servers[0]
			return m.Addr(), func() error { m.Close(); return nil }, m.Restart
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			addr, kill, restart := b.start(t)
			got := make(chan string, 1000)
			sub := newSubscription(t, RedisOptions{Addr: addr}, got, nil, DefaultPingAfter)
			mustReady(t, sub)
			n := newNode(t, RedisOptions{Addr: addr})
			releaseAndExpect(t, n, got, "before")
			if err := kill(); err != nil {
				t.Fatal(err)
			}
			eventually(t, testTimeout, "Ready waits while the node is down", func() bool {
				return notReady(sub)
			})
			if err := restart(); err != nil {
				t.Fatal(err)
			}
			deliversAgain(t, rawClient(t, addr), got)
			mustReady(t, sub)
			releaseAndExpect(t, n, got, "after")
		})
	}
}

// TestSubscriptionKeepsQuietConnection: a quiet subscription PINGs the node,
// and the answers keep the connection: there is no reconnect. The node
// timeout is 5 s, far longer than a loaded machine takes to answer a PING
// (with 50 ms an answer read late was taken for a dead node); the PINGs
// still go every 10 ms.
func TestSubscriptionKeepsQuietConnection(t *testing.T) {
	for _, b := range []struct {
		name string
		// start returns the node's address and a count of the commands it
		// answered (PINGs on redis, all commands on miniredis).
		start func(t *testing.T) (string, func() int64)
	}{
		{"redis", func(t *testing.T) (string, func() int64) {
			addr := redistest.Start(t, redistest.Options{}).Addr()
			raw := rawClient(t, addr)
			return addr, func() int64 { return pingCalls(t, raw) }
		}},
		{"miniredis", func(t *testing.T) (string, func() int64) {
			m := startEmbedded(t, 1).servers[0]
			return m.Addr(), func() int64 { return int64(m.CommandCount()) }
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			addr, commands := b.start(t)
			core, logs := observer.New(zapcore.DebugLevel)
			got := make(chan string, 10)
			sub := newSubscription(t, RedisOptions{Addr: addr, Timeout: 5 * time.Second}, got, zap.New(core), 10*time.Millisecond)
			mustReady(t, sub)
			first := commands()
			eventually(t, testTimeout, "quiet subscription pinged 10 times", func() bool { return commands() >= first+10 })
			if failed := logs.FilterMessageSnippet("failed"); failed.Len() != 0 {
				t.Fatalf("a quiet, healthy connection failed:\n%v", failed.All())
			}
			releaseAndExpect(t, newNode(t, RedisOptions{Addr: addr}), got, "k")
		})
	}
}

// TestSubscriptionNoticesSilentNode: a node that answers nothing while the
// connection stays open (SIGSTOP) is noticed within PING interval + Timeout,
// and the subscription dials again until it is back.
func TestSubscriptionNoticesSilentNode(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	core, logs := observer.New(zapcore.DebugLevel)
	got := make(chan string, 1000)
	sub := newSubscription(t, RedisOptions{Addr: s.Addr(), Timeout: 100 * time.Millisecond}, got, zap.New(core), 20*time.Millisecond)
	mustReady(t, sub)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	eventually(t, testTimeout, "a silent node is noticed", func() bool { return notReady(sub) })
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	deliversAgain(t, rawClient(t, s.Addr()), got)
	if logs.FilterMessageSnippet("subscribed again").Len() == 0 {
		t.Errorf("no recovery logged:\n%v", logs.All())
	}
}

// TestSubscriptionClose: Close ends every goroutine of the subscription and
// its connection, and Ready then reports ErrClosed.
func TestSubscriptionClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		baseline := runtime.NumGoroutine()
		got := make(chan string, 10)
		sub := Subscribe(RedisOptions{Addr: addr}, func(k, _ string) { got <- k }, nil)
		mustReady(t, sub)
		n := NewRedisNode(RedisOptions{Addr: addr})
		releaseAndExpect(t, n, got, "k")
		n.Close()
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		if err := sub.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
		if err := sub.Ready(testCtx(t)); !errors.Is(err, ErrClosed) {
			t.Errorf("Ready after Close = %v, want ErrClosed", err)
		}
		checkNoGoroutines(t, baseline)
	})
}

// TestSubscriptionCloseWhileDown: Close is prompt and leaves nothing behind
// while the subscription waits to reconnect to a dead node.
func TestSubscriptionCloseWhileDown(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	baseline := runtime.NumGoroutine()
	core, logs := observer.New(zapcore.DebugLevel)
	sub := Subscribe(RedisOptions{Addr: s.Addr()}, func(string, string) { t.Error("notification from a dead node") }, zap.New(core))
	eventually(t, testTimeout, "reconnects attempted", func() bool {
		return logs.FilterMessageSnippet("failed").Len() >= 3
	})
	if !notReady(sub) {
		t.Error("Ready returned for a dead node")
	}
	start := time.Now()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v", took)
	}
	checkNoGoroutines(t, baseline)
}

// newSubscription subscribes with a callback that sends each key to got,
// and closes the subscription when the test ends.
func newSubscription(t *testing.T, o RedisOptions, got chan<- string, log *zap.Logger, pingAfter time.Duration) *Subscription {
	t.Helper()
	sub := subscribe(o, func(k, _ string) { got <- k }, log, pingAfter)
	t.Cleanup(func() { sub.Close() })
	return sub
}

func mustReady(t *testing.T, sub *Subscription) {
	t.Helper()
	if err := sub.Ready(testCtx(t)); err != nil {
		t.Fatalf("Ready: %v", err)
	}
}

// notReady tells whether Ready is waiting: the subscription noticed it is
// not subscribed.
func notReady(sub *Subscription) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	return errors.Is(sub.Ready(ctx), context.DeadlineExceeded)
}

// rawSubscribe subscribes a plain client to channels and waits until the
// node confirmed each.
func rawSubscribe(t *testing.T, raw *redis.Client, channels ...string) *redis.PubSub {
	t.Helper()
	ps := raw.Subscribe(testCtx(t), channels...)
	t.Cleanup(func() { ps.Close() })
	for range channels {
		if m, err := ps.Receive(testCtx(t)); err != nil {
			t.Fatalf("SUBSCRIBE: %v", err)
		} else if _, ok := m.(*redis.Subscription); !ok {
			t.Fatalf("SUBSCRIBE: got %v", m)
		}
	}
	return ps
}

// next is the next notification that is not a leftover of deliversAgain.
func next(t *testing.T, got <-chan string) string {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		select {
		case k := <-got:
			if !strings.HasPrefix(k, "again-") {
				return k
			}
		case <-timeout:
			t.Fatal("no notification")
		}
	}
}

// releaseAndExpect acquires and releases key through n and expects its
// notification next.
func releaseAndExpect(t *testing.T, n *RedisNode, got <-chan string, key string) {
	t.Helper()
	releaseWhileWaited(t, n, key)
	if k := next(t, got); k != key {
		t.Fatalf("notification %q, want %q", k, key)
	}
}

// releaseWhileWaited takes key for token "a", puts a waiter in line, and
// releases it: a release publishes only while someone waits. The waiter
// then takes and releases the key, with nobody in line: no second message.
func releaseWhileWaited(t *testing.T, n *RedisNode, key string) {
	t.Helper()
	mustAcquire(t, n, key, hold("a", time.Minute))
	w := waiting("w", "w", time.Now())
	if c, err := n.Acquire(testCtx(t), key, w); err != nil || c.State != quorum.Taken {
		t.Fatalf("waiter: %+v %v", c, err)
	}
	mustRelease(t, n, key, "a", true)
	if c, err := n.Acquire(testCtx(t), key, w); err != nil || c.State != quorum.Acquired {
		t.Fatalf("waiter after the release: %+v %v", c, err)
	}
	mustRelease(t, n, key, "w", true)
}

// deliversAgain publishes fresh keys until the subscription delivers one:
// those published while it is still down are lost, so it publishes again
// every 20ms, up to a deadline.
func deliversAgain(t *testing.T, raw *redis.Client, got <-chan string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for i := 0; time.Now().Before(deadline); i++ {
		raw.Publish(testCtx(t), defaultChannel, fmt.Sprint("0:again-", i)) // fails while the node is down
		select {
		case k := <-got:
			if !strings.HasPrefix(k, "again-") {
				t.Fatalf("unexpected notification %q", k)
			}
			return
		case <-poll.C:
		}
	}
	t.Fatalf("no notification within %v", testTimeout)
}

// pingCalls is how many PINGs the node has answered.
func pingCalls(t *testing.T, raw *redis.Client) int64 {
	t.Helper()
	info, err := raw.Info(testCtx(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_ping:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// checkNoGoroutines waits until no goroutine runs Subscription code and the
// goroutine count is back to baseline, and fails listing them if not.
func checkNoGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "upstream.(*Subscription)") && runtime.NumGoroutine() <= baseline {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), baseline, stacks)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParseRelease(t *testing.T) {
	for _, tc := range []struct {
		msg, key, token string
		ok              bool
	}{
		{"3:abck", "k", "abc", true},
		{"0:end", "end", "", true},
		{"5:a:b:ckey:with:colons", "key:with:colons", "a:b:c", true},
		{"2:ab", "", "ab", true},
		{"9:short", "", "", false},
		{"x:abc", "", "", false},
		{"end", "", "", false},
		{"-1:abc", "", "", false},
	} {
		key, token, ok := parseRelease(tc.msg)
		if key != tc.key || token != tc.token || ok != tc.ok {
			t.Errorf("%q: %q %q %v", tc.msg, key, token, ok)
		}
	}
}
