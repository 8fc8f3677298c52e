package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Sharded pub/sub without a data Redis, as Redis 7.0 serves it when it is
// not a cluster: shard channels are a namespace of their own (SPUBLISH
// reaches SSUBSCRIBE subscribers only, PUBLISH and patterns never touch
// them), confirmations count shard channels apart from channels and
// patterns, and any of them puts a RESP2 connection in subscribed mode.

// shardSteps is a session as pubsubSteps. Every message read is followed
// by a step whose reply would come out wrong if a message had been
// delivered to a subscriber Redis does not deliver it to.
var shardSteps = []string{
	"a 1: SSUBSCRIBE", "c 1: SPUBLISH K", "c 1: SPUBLISH K a b", "a 1: SUNSUBSCRIBE",
	"a 2: SSUBSCRIBE K K:2", "a 1: SSUBSCRIBE K",
	"a 1: GET K", "a 1: PING", "a 1: PING hi",
	"b 1: SUBSCRIBE K",
	"c 1: SPUBLISH K hello", "a 1:",
	"c 1: PUBLISH K plain", "b 1:",
	"a 1: SUBSCRIBE K:3", "a 1: PSUBSCRIBE K:*",
	"c 1: SPUBLISH K:2 two", "a 1:",
	"c 1: PUBLISH K:2 p", "a 1:",
	"c 1: SPUBLISH K:3 none", "c 1: SPUBLISH other none",
	"a 1: SUNSUBSCRIBE K", "c 1: SPUBLISH K gone", "a 1: SUNSUBSCRIBE", "a 1: SUNSUBSCRIBE", "a 1: SUNSUBSCRIBE K",
	"a 1: UNSUBSCRIBE", "a 1: PUNSUBSCRIBE", "a 1: GET K",
	"a 1: SSUBSCRIBE K", "a 1: UNSUBSCRIBE", "a 1: PUNSUBSCRIBE", "a 1: GET K", "a 1: PING",
	"a 1: RESET", "c 1: SPUBLISH K after-reset", "a 1: GET K",
	"b 1: UNSUBSCRIBE", "c 1: PUBLISH K x",
}

// TestShardPubSubRepliesMatchRedis runs shardSteps on a plain redis-server
// and on lockproxy (embedded, and redlock over three nodes), in RESP2 and
// RESP3, and compares every frame byte for byte.
func TestShardPubSubRepliesMatchRedis(t *testing.T) { stepsMatchRedis(t, shardSteps) }

// spublishScript stands in for an unlock script run on every node by
// quorum that announces on a shard channel.
const spublishScript = "return redis.call('spublish', KEYS[1], ARGV[1])"

// shardAcross checks, for a SSUBSCRIBE subscriber on subAddr and a
// SUBSCRIBE one of the same channel: an SPUBLISH made on pubAddr, a
// script's spublish on each of scriptNodes, and a script with its publish
// command in ARGV (Redisson 3.22+) run through pubAddr with "spublish",
// and a script's literal spublish run through pubAddr, reach the shard
// subscriber once each, in order; the channel subscriber
// gets only the PUBLISH.
func shardAcross(t *testing.T, pubAddr, subAddr string, scriptNodes []string, proto int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := uniqueKey(t)
	subc := newClient(t, subAddr, proto)
	ssub := subc.SSubscribe(ctx, key)
	defer ssub.Close()
	sub := subc.Subscribe(ctx, key)
	defer sub.Close()
	for _, s := range []*redis.PubSub{ssub, sub} {
		if _, err := s.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
	}
	pub := newClient(t, pubAddr, proto)
	if n, err := pub.SPublish(ctx, key, "m1").Result(); err != nil || n != 1 {
		t.Fatalf("SPUBLISH: %d %v, want 1 receiver", n, err)
	}
	for _, c := range nodeClients(t, scriptNodes...) {
		if err := c.Eval(ctx, spublishScript, []string{key}, "unlocked").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Eval(ctx, publishFromARGV, []string{key}, "0", "spublish").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Eval(ctx, spublishScript, []string{key}, "literal").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, key, "plain").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pub.SPublish(ctx, key, "end").Err(); err != nil {
		t.Fatal(err)
	}
	expectMessages(ctx, t, ssub, key+" m1", key+" unlocked", key+" 0", key+" literal", key+" end")
	expectMessages(ctx, t, sub, key+" plain")
	// The same payload again is a new message, delivered again.
	if err := pub.SPublish(ctx, key, "m1").Err(); err != nil {
		t.Fatal(err)
	}
	expectMessages(ctx, t, ssub, key+" m1")
}

// TestShardPubSubAcrossInstances runs shardAcross on one redis-server (the
// check's reference) and on two lockproxy instances over the same three
// nodes, publishing through A and subscribing through B, in RESP2 and RESP3.
func TestShardPubSubAcrossInstances(t *testing.T) { acrossInstances(t, shardAcross) }

// TestShardPubSubReservedChannel: lockproxy's release channel is refused
// to SSUBSCRIBE and SPUBLISH as it is to SUBSCRIBE and PUBLISH.
func TestShardPubSubReservedChannel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := redistest.StartN(t, 3, redistest.Options{})
	in := startInstance(t, testConfig(nodes))
	c := dialProto(t, in.Addr(), 2)
	for _, cmd := range [][]string{{"SSUBSCRIBE", "lockproxy:released"}, {"SPUBLISH", "lockproxy:released", "1:ak"}} {
		if r := c.do(cmd...); !strings.HasPrefix(r, "-ERR channel 'lockproxy:released' is reserved") {
			t.Fatalf("%v: %q", cmd, r)
		}
	}
	if r := c.do("GET", "k"); r != "(nil)" && !strings.HasPrefix(r, "$") {
		t.Fatalf("connection after the refusals: %q", r)
	}
	_ = ctx
}

// TestShardPubSubNoQuorum: with two nodes of three paused, SPUBLISH and a
// first SSUBSCRIBE (which dials the nodes' shard connections) are errors
// that say so, and the connection stays usable and out of subscribed
// mode; resumed, SSUBSCRIBE and SPUBLISH work again.
func TestShardPubSubNoQuorum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Redlock.NodeTimeoutMS = 500
	in := startInstance(t, cfg)
	key := uniqueKey(t)
	for _, n := range nodes[1:] {
		pause(t, n)
	}
	c := newClient(t, in.Addr(), 2)
	if err := c.SPublish(ctx, key, "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM published on 1 of 3 nodes") {
		t.Fatalf("SPUBLISH without a majority: %v", err)
	}
	raw := dialRaw(t, in.Addr())
	if r := raw.do("SSUBSCRIBE", key); !strings.HasPrefix(r, "-NOQUORUM subscribed on ") {
		t.Fatalf("SSUBSCRIBE without a majority: %q", r)
	}
	if r := raw.do("PING"); r != "+PONG" {
		t.Fatalf("PING after the refused SSUBSCRIBE (not in subscribed mode): %q", r)
	}
	for _, n := range nodes[1:] {
		resume(t, n)
	}
	// The nodes' connections notice and come back by themselves (bounded
	// by the ping interval and the node timeout); retry until then.
	sub := newClient(t, in.Addr(), 3)
	var ps *redis.PubSub
	eventually(t, 30*time.Second, "SSUBSCRIBE confirmed once the nodes are back", func() bool {
		ps = sub.SSubscribe(ctx, key)
		if _, err := ps.Receive(ctx); err == nil {
			return true
		}
		ps.Close()
		return false
	})
	defer ps.Close()
	if n, err := c.SPublish(ctx, key, "back").Result(); err != nil || n != 1 {
		t.Fatalf("SPUBLISH once the nodes are back: %d %v", n, err)
	}
	expectMessages(ctx, t, ps, key+" back")
}
