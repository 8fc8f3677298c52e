package instance_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// pubsubInfoSteps exercise PUBSUB's subcommands, errors included, while
// connections b and c subscribe and leave. Lists of channels are asked
// where they hold at most one name, and several are left by name (Redis
// lists them in its own order, lockproxy sorted).
var pubsubInfoSteps = []string{
	"a 1: PUBSUB", "a 1: PUBSUB NOPE", "a 1: PUBSUB numpat x", "a 1: PUBSUB HELP x",
	"a 1: PUBSUB Channels a b", "a 1: PUBSUB shardChannels a b", "a 1: PUBSUB help",
	"a 1: PUBSUB NUMSUB", "a 1: PUBSUB SHARDNUMSUB", "a 1: PUBSUB NUMPAT", "a 1: PUBSUB CHANNELS K:*",
	"a 1: PUBSUB CHANNELS", "a 1: PUBSUB SHARDCHANNELS",
	"b 1: SUBSCRIBE K:1", "c 1: SUBSCRIBE K:1", "c 1: PSUBSCRIBE K:*", "b 1: PSUBSCRIBE K:*",
	"b 1: PSUBSCRIBE K:x*", "b 1: SSUBSCRIBE K:s", "b 1: SSUBSCRIBE K:1",
	"a 1: PUBSUB NUMSUB K:1 K:2 K:s K:1", "a 1: PUBSUB shardnumsub K:s K:1 K:2", "a 1: PUBSUB NUMPAT",
	"a 1: PUBSUB CHANNELS K:*", "a 1: PUBSUB channels", "a 1: PUBSUB CHANNELS K:s", "a 1: PUBSUB CHANNELS K:?",
	"a 1: PUBSUB SHARDCHANNELS K:s*", "a 1: PUBSUB SHARDCHANNELS K:1",
	"b 1: UNSUBSCRIBE", "a 1: PUBSUB NUMSUB K:1",
	"b 2: PUNSUBSCRIBE K:* K:x*", "a 1: PUBSUB NUMPAT",
	"b 2: SUNSUBSCRIBE K:s K:1", "a 1: PUBSUB SHARDCHANNELS", "a 1: PUBSUB SHARDNUMSUB K:s",
	"c 1: UNSUBSCRIBE", "c 1: PUNSUBSCRIBE",
	"a 1: PUBSUB NUMSUB K:1", "a 1: PUBSUB NUMPAT", "a 1: PUBSUB CHANNELS",
}

// TestPubSubIntrospectionMatchesRedis runs pubsubInfoSteps on a plain
// redis-server and on lockproxy (embedded, and redlock over three nodes),
// in RESP2 and RESP3, and compares every frame byte for byte.
func TestPubSubIntrospectionMatchesRedis(t *testing.T) { stepsMatchRedis(t, pubsubInfoSteps) }

// TestPubSubIntrospectionIsLocal: PUBSUB counts the subscribers of the
// instance asked — what a client sees of the server it talks to — not
// those of another instance over the same nodes, whose messages it still
// delivers (TestPubSubAcrossInstances).
func TestPubSubIntrospectionIsLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := redistest.StartN(t, 3, redistest.Options{})
	a, b := startInstance(t, testConfig(nodes)), startInstance(t, testConfig(nodes))
	key := uniqueKey(t)
	sub := newClient(t, b.Addr(), 2).Subscribe(ctx, key)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		want int64
	}{{a.Addr(), 0}, {b.Addr(), 1}} {
		n, err := newClient(t, tc.addr, 2).PubSubNumSub(ctx, key).Result()
		if err != nil || n[key] != tc.want {
			t.Fatalf("PUBSUB NUMSUB through %s: %v %v, want %d", tc.addr, n, err, tc.want)
		}
	}
}
