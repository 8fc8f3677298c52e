package instance_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// pubsubSteps is a pub/sub session: "a 2: CMD" sends CMD on connection a
// and reads 2 frames; "a 1:" only reads (a message). K is a unique
// channel name.
var pubsubSteps = []string{
	"a 1: SUBSCRIBE", // arity error
	"a 2: SUBSCRIBE K K:2", "a 1: SUBSCRIBE K", "a 1: PSUBSCRIBE K:*",
	"a 1: GET K", "a 1: PING", "a 1: PING hi", "a 1: PING a b",
	"b 1: PUBLISH K hello", "a 1:",
	"b 1: PUBLISH K:2 two", "a 1:", "a 1:",
	"b 1: PUBLISH other x", "b 1: PUBLISH K", "b 1: PUBLISH K a b",
	"a 1: UNSUBSCRIBE K", "b 1: PUBLISH K again", "b 1: PUBLISH K:x again", "a 1:",
	"a 1: PUNSUBSCRIBE", "a 1: PUNSUBSCRIBE", "a 1: UNSUBSCRIBE", "a 1: UNSUBSCRIBE",
	"a 1: PING", "a 1: GET K",
	"a 1: SUBSCRIBE K", "a 1: RESET", "b 1: PUBLISH K gone", "a 1: PING",
}

// TestPubSubRepliesMatchRedis runs pubsubSteps on a plain redis-server and
// on lockproxy, in RESP2 and RESP3, and compares every frame byte for byte.
func TestPubSubRepliesMatchRedis(t *testing.T) { stepsMatchRedis(t, pubsubSteps) }

// stepsMatchRedis runs steps (as pubsubSteps) on a plain redis-server and
// on lockproxy (embedded, and redlock over three nodes), in RESP2 and
// RESP3, and compares every frame byte for byte.
func stepsMatchRedis(t *testing.T, steps []string) {
	plain := redistest.Start(t, redistest.Options{})
	check := func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
				key := uniqueKey(t)
				want := runSteps(t, plain.Addr(), proto, key, steps)
				got := runSteps(t, in.Addr(), proto, key, steps)
				if testing.Verbose() {
					t.Logf("redis:\n%s", strings.Join(want, "\n"))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("frame %d: lockproxy %q, redis %q", i, got[i], want[i])
					}
				}
			})
		}
	}
	t.Run("embedded", func(t *testing.T) { check(t, embeddedConfig()) })
	t.Run("redlock", func(t *testing.T) { check(t, testConfig(redistest.StartN(t, 3, redistest.Options{}))) })
}

// runSteps runs steps (as pubsubSteps) against addr and returns every
// frame read, labelled with its step.
func runSteps(t *testing.T, addr string, proto int, key string, steps []string) []string {
	conns := map[string]*rawConn{}
	var out []string
	for _, step := range steps {
		head, cmd, _ := strings.Cut(step, ":")
		cmd = strings.TrimSpace(cmd)
		name, count, _ := strings.Cut(head, " ")
		n, _ := strconv.Atoi(count)
		c := conns[name]
		if c == nil {
			c = dialProto(t, addr, proto)
			conns[name] = c
		}
		if cmd != "" {
			c.send(multibulk(scenarioArgs(cmd, key, "")))
		}
		for range n {
			c.c.SetReadDeadline(deadline())
			raw, err := readRaw(c.rd)
			if err != nil {
				t.Fatalf("%s: %v; read so far %q", step, err, out)
			}
			out = append(out, step+" -> "+raw)
		}
	}
	return out
}

// TestPubSubGoRedis uses go-redis's PubSub, in RESP2 and RESP3: a channel
// and a pattern subscriber receive each message once, and the publishing
// connection keeps taking locks.
func TestPubSubGoRedis(t *testing.T) {
	in := startInstance(t, embeddedConfig())
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := uniqueKey(t)
			c := newClient(t, in.Addr(), proto)
			sub := c.Subscribe(ctx, key)
			defer sub.Close()
			psub := c.PSubscribe(ctx, key+":*")
			defer psub.Close()
			for _, s := range []*redis.PubSub{sub, psub} {
				if _, err := s.Receive(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := c.Publish(ctx, key, "unlocked").Result(); n != 1 || err != nil {
				t.Fatalf("PUBLISH: %d %v", n, err)
			}
			if n, err := c.Publish(ctx, key+":x", "p").Result(); n != 1 || err != nil {
				t.Fatalf("PUBLISH to the pattern: %d %v", n, err)
			}
			m, err := sub.ReceiveMessage(ctx)
			if err != nil || m.Channel != key || m.Payload != "unlocked" {
				t.Fatalf("message: %+v %v", m, err)
			}
			m, err = psub.ReceiveMessage(ctx)
			if err != nil || m.Pattern != key+":*" || m.Channel != key+":x" || m.Payload != "p" {
				t.Fatalf("pmessage: %+v %v", m, err)
			}
			if ok, err := c.SetNX(ctx, key, "tok", time.Minute).Result(); !ok || err != nil {
				t.Fatalf("SET NX beside the subscriptions: %v %v", ok, err)
			}
		})
	}
}
