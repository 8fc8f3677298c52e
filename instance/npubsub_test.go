package instance_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Pub/sub through the nodes: what one instance's client publishes, or a
// script publishes on every node, reaches the subscribers of every
// instance over the same nodes once.

// publishScript stands in for a lock library's unlock script run on every
// node by quorum: it publishes its argument on its key.
const publishScript = "return redis.call('publish', KEYS[1], ARGV[1])"

// nodeClients are go-redis clients of each address, closed with the test.
func nodeClients(t *testing.T, addrs ...string) []*redis.Client {
	var out []*redis.Client
	for _, a := range addrs {
		out = append(out, newClient(t, a, 2))
	}
	return out
}

// expectMessages reads from sub the messages want ("channel payload" or
// "pattern channel payload"), in order, and nothing in between.
func expectMessages(ctx context.Context, t *testing.T, sub *redis.PubSub, want ...string) {
	t.Helper()
	for _, w := range want {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", w, err)
		}
		got := m.Channel + " " + m.Payload
		if m.Pattern != "" {
			got = m.Pattern + " " + got
		}
		if got != w {
			t.Fatalf("message %q, want %q", got, w)
		}
	}
}

// pubsubAcross checks, for a subscriber on subAddr: a PUBLISH made on
// pubAddr and a script's publish on each of scriptNodes arrive once each,
// on a channel and on a pattern, in the order published.
func pubsubAcross(t *testing.T, pubAddr, subAddr string, scriptNodes []string, proto int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := uniqueKey(t)
	sub := newClient(t, subAddr, proto).Subscribe(ctx, key)
	defer sub.Close()
	if err := sub.PSubscribe(ctx, key+":*"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := sub.Receive(ctx); err != nil { // the confirmations
			t.Fatal(err)
		}
	}
	pub := newClient(t, pubAddr, proto)
	if n, err := pub.Publish(ctx, key, "m1").Result(); err != nil || n < 1 {
		t.Fatalf("PUBLISH: %d %v, want at least 1 receiver", n, err)
	}
	for _, c := range nodeClients(t, scriptNodes...) {
		if err := c.Eval(ctx, publishScript, []string{key}, "unlocked").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"first", "second"} {
		if err := pub.Publish(ctx, key, m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range nodeClients(t, scriptNodes...) {
		if err := c.Eval(ctx, publishScript, []string{key + ":x"}, "p").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish(ctx, key, "end").Err(); err != nil {
		t.Fatal(err)
	}
	expectMessages(ctx, t, sub, key+" m1", key+" unlocked", key+" first", key+" second",
		key+":* "+key+":x p", key+" end")
	// The same payload again is a new message, delivered again.
	if err := pub.Publish(ctx, key, "m1").Err(); err != nil {
		t.Fatal(err)
	}
	expectMessages(ctx, t, sub, key+" m1")
}

// TestPubSubAcrossInstances runs pubsubAcross on one redis-server (the
// check's reference) and on two lockproxy instances over the same three
// nodes, publishing through A and subscribing through B, in RESP2 and RESP3.
func TestPubSubAcrossInstances(t *testing.T) { acrossInstances(t, pubsubAcross) }

// acrossInstances runs check, in RESP2 and RESP3, on one redis-server
// (publishing and subscribing there, the check's reference), then on two
// lockproxy instances A and B over the same three nodes (publishing
// through A, subscribing through B); nodes are the servers behind them.
func acrossInstances(t *testing.T, check func(t *testing.T, pubAddr, subAddr string, nodes []string, proto int)) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			t.Run("redis", func(t *testing.T) {
				r := redistest.Start(t, redistest.Options{})
				check(t, r.Addr(), r.Addr(), []string{r.Addr()}, proto)
			})
			t.Run("lockproxy", func(t *testing.T) {
				nodes := redistest.StartN(t, 3, redistest.Options{})
				a, b := startInstance(t, testConfig(nodes)), startInstance(t, testConfig(nodes))
				check(t, a.Addr(), b.Addr(), addrsOf(nodes), proto)
			})
		})
	}
}

func addrsOf(nodes []*redistest.Server) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Addr())
	}
	return out
}

// channelKind is one kind of channel as a go-redis client uses it:
// channels (SUBSCRIBE, PUBLISH) or shard channels (SSUBSCRIBE, SPUBLISH).
type channelKind struct {
	subscribe func(ctx context.Context, c *redis.Client, ch string) *redis.PubSub
	publish   func(ctx context.Context, c *redis.Client, ch, msg string) error
	numSub    func(ctx context.Context, c *redis.Client, ch string) (map[string]int64, error)
	script    string // publishes ARGV[1] on KEYS[1], run on every node
}

var (
	plainChannels = channelKind{
		subscribe: func(ctx context.Context, c *redis.Client, ch string) *redis.PubSub { return c.Subscribe(ctx, ch) },
		publish: func(ctx context.Context, c *redis.Client, ch, msg string) error {
			return c.Publish(ctx, ch, msg).Err()
		},
		numSub: func(ctx context.Context, c *redis.Client, ch string) (map[string]int64, error) {
			return c.PubSubNumSub(ctx, ch).Result()
		},
		script: publishScript,
	}
	shardChannels = channelKind{
		subscribe: func(ctx context.Context, c *redis.Client, ch string) *redis.PubSub { return c.SSubscribe(ctx, ch) },
		publish: func(ctx context.Context, c *redis.Client, ch, msg string) error {
			return c.SPublish(ctx, ch, msg).Err()
		},
		numSub: func(ctx context.Context, c *redis.Client, ch string) (map[string]int64, error) {
			return c.PubSubShardNumSub(ctx, ch).Result()
		},
		script: spublishScript,
	}
)

// TestPubSubNodeKilledAndBack: with a node killed, messages still arrive
// from the others; restarted, it is subscribed again, and carries them
// alone while the other two are paused; with all three back, each message
// arrives once.
func TestPubSubNodeKilledAndBack(t *testing.T) { testNodeKilledAndBack(t, plainChannels) }

// TestShardPubSubNodeKilledAndBack is TestPubSubNodeKilledAndBack for
// shard channels, which travel on each node's second pub/sub connection.
func TestShardPubSubNodeKilledAndBack(t *testing.T) { testNodeKilledAndBack(t, shardChannels) }

func testNodeKilledAndBack(t *testing.T, kind channelKind) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := redistest.StartN(t, 3, redistest.Options{})
	a, b := startInstance(t, testConfig(nodes)), startInstance(t, testConfig(nodes))
	key := uniqueKey(t)
	sub := kind.subscribe(ctx, newClient(t, b.Addr(), 3), key)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	pub := newClient(t, a.Addr(), 2)
	direct := nodeClients(t, addrsOf(nodes)...)

	if err := nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := kind.publish(ctx, pub, key, "while-killed"); err != nil {
		t.Fatalf("publishing with one node of three killed: %v", err)
	}
	for _, c := range direct[1:] {
		if err := c.Eval(ctx, kind.script, []string{key}, "script-while-killed").Err(); err != nil {
			t.Fatal(err)
		}
	}
	expectMessages(ctx, t, sub, key+" while-killed", key+" script-while-killed")

	if err := nodes[0].Restart(); err != nil {
		t.Fatal(err)
	}
	// B subscribes again on the restarted node by itself.
	eventually(t, 30*time.Second, "B subscribed again on the restarted node", func() bool {
		n, err := kind.numSub(ctx, direct[0], key)
		return err == nil && n[key] >= 1
	})
	for _, n := range nodes[1:] {
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Resume() })
	}
	if err := kind.publish(ctx, direct[0], key, "through-the-restarted-node"); err != nil {
		t.Fatal(err)
	}
	expectMessages(ctx, t, sub, key+" through-the-restarted-node")
	for _, n := range nodes[1:] {
		if err := n.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	// All three again: once.
	for _, m := range []string{"after", "end"} {
		if err := kind.publish(ctx, pub, key, m); err != nil {
			t.Fatal(err)
		}
	}
	expectMessages(ctx, t, sub, key+" after", key+" end")
}

// TestPubSubNoQuorum: with two nodes of three paused, PUBLISH and a new
// SUBSCRIBE are errors that say so, and the connection stays usable.
func TestPubSubNoQuorum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Redlock.NodeTimeoutMS = 500
	in := startInstance(t, cfg)
	key := uniqueKey(t)
	for _, n := range nodes[1:] {
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Resume() })
	}
	c := newClient(t, in.Addr(), 2)
	if err := c.Publish(ctx, key, "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM published on 1 of 3 nodes") {
		t.Fatalf("PUBLISH without a majority: %v", err)
	}
	raw := dialRaw(t, in.Addr())
	if r := raw.do("SUBSCRIBE", key); !strings.HasPrefix(r, "-NOQUORUM subscribed on 1 of 3 nodes") {
		t.Fatalf("SUBSCRIBE without a majority: %q", r)
	}
	if r := raw.do("PING"); r != "+PONG" {
		t.Fatalf("PING after the refused SUBSCRIBE (not in subscribed mode): %q", r)
	}
}

// TestRedisCLISubscriberAcrossInstances: redis-cli subscribed through
// instance B, in RESP2 and RESP3, prints a script's publish on all three
// nodes once, and a PUBLISH made through instance A once.
func TestRedisCLISubscriberAcrossInstances(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	a, b := startInstance(t, testConfig(nodes)), startInstance(t, testConfig(nodes))
	for _, proto := range []string{"-2", "-3"} {
		t.Run(proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := uniqueKey(t)
			host, port, _ := net.SplitHostPort(b.Addr())
			cmd := exec.CommandContext(ctx, "redis-cli", proto, "-h", host, "-p", port, "SUBSCRIBE", key)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			lines := make(chan string, 100)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			next := func() string {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("redis-cli ended")
					}
					return l
				case <-ctx.Done():
					t.Fatal("no line from redis-cli")
				}
				return ""
			}
			for next() != "1" { // subscribe, the channel, the count
			}
			for _, c := range nodeClients(t, addrsOf(nodes)...) {
				if err := c.Eval(ctx, publishScript, []string{key}, "unlocked").Err(); err != nil {
					t.Fatal(err)
				}
			}
			pub := newClient(t, a.Addr(), 2)
			for _, m := range []string{"through-a", "end"} {
				if err := pub.Publish(ctx, key, m).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var payloads []string
			for {
				l := next()
				if l == "unlocked" || l == "through-a" || l == "end" {
					payloads = append(payloads, l)
				}
				if l == "end" {
					break
				}
			}
			if strings.Join(payloads, " ") != "unlocked through-a end" {
				t.Fatalf("redis-cli printed %q, want each message once, in order", payloads)
			}
		})
	}
}

// TestPubSubReservedChannel: lockproxy's release channel, whose messages
// name tokens and tell instances of locks taken, is neither subscribed nor
// published through lockproxy, and a pattern matching it hears nothing of
// a release.
func TestPubSubReservedChannel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, nodes := startRedlock(t, 3)
	other := startInstance(t, testConfig(nodes)) // the waiter's: the release is published
	raw := dialRaw(t, in.Addr())
	if got := raw.do("PUBLISH", "lockproxy:released", "taken:1:tk"); !strings.HasPrefix(got, "-ERR channel 'lockproxy:released' is reserved") {
		t.Fatalf("PUBLISH on the release channel: %q", got)
	}
	if got := raw.do("SUBSCRIBE", "lockproxy:released"); !strings.HasPrefix(got, "-ERR channel 'lockproxy:released' is reserved") {
		t.Fatalf("SUBSCRIBE to the release channel: %q", got)
	}
	key := uniqueKey(t)
	sub := newClient(t, in.Addr(), 2).PSubscribe(ctx, "lockproxy:*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, in.Addr(), 2)
	waiter := newClient(t, other.Addr(), 2)
	l := mustLock(t, c, key, "PX", 60000)
	woken := make(chan error, 1)
	go func() {
		_, _, err := lock(ctx, newClient(t, other.Addr(), 2), key, "PX", 60000, "WAIT", 30000)
		woken <- err
	}()
	eventually(t, 30*time.Second, "a waiter in line", func() bool {
		info, err := waiter.Do(ctx, "LOCKINFO", key).Result()
		return err == nil && strings.Contains(fmt.Sprint(info), "waiters 1")
	})
	if err := c.Do(ctx, "UNLOCK", key, l.token).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-woken; err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "lockproxy:end", "end").Err(); err != nil {
		t.Fatal(err)
	}
	expectMessages(ctx, t, sub, "lockproxy:* lockproxy:end end")
}
