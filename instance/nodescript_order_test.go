package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/netfault"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// appendScript appends ARGV[1] to KEYS[1] and returns the new length: the
// order in which a node ran two such scripts shows in the string.
const appendScript = "return redis.call('APPEND', KEYS[1], ARGV[1])"

// TestScriptOrderAcrossInstances: two instances over the same three
// redis-servers; instance A reaches the third node through a link with
// extra latency, so that A's script lands there after B's script sent
// later. Rounds of "A appends a, then B appends b" must leave every node
// with the same string, "abab...", as one Redis would hold, and B's
// replies must be the lengths one Redis would give.
func TestScriptOrderAcrossInstances(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	slow, err := netfault.Listen(nodes[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Close() })
	cfgB := testConfig(nodes)
	cfgB.Redlock.NodeTimeoutMS = 5000 // a loaded machine's round trips through the slow link fit
	cfgA := cfgB
	cfgA.Redlock.Nodes = []string{nodes[0].Addr(), nodes[1].Addr(), slow.Addr()}
	a := newClient(t, startInstance(t, cfgA).Addr(), 2)
	b := newClient(t, startInstance(t, cfgB).Addr(), 2)
	key := uniqueKey(t)
	ctx := context.Background()
	// Warm A's connections (and the scripts' cache) before the delay.
	if err := a.Eval(ctx, appendScript, []string{key + ":warm"}, "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Eval(ctx, appendScript, []string{key + ":warm"}, "x").Err(); err != nil {
		t.Fatal(err)
	}
	slow.SetDelay(150 * time.Millisecond)

	const rounds = 3
	var want strings.Builder
	for range rounds {
		for _, step := range []struct {
			c     *redis.Client
			value string
		}{{a, "a"}, {b, "b"}} {
			want.WriteString(step.value)
			n, err := step.c.Eval(ctx, appendScript, []string{key}, step.value).Int64()
			if err != nil {
				t.Fatalf("append %q: %v", step.value, err)
			}
			if n != int64(want.Len()) {
				t.Fatalf("append %q replied %d, one Redis would reply %d", step.value, n, want.Len())
			}
		}
	}
	// Every node ran every script (the slow link's last calls landing
	// within a few seconds), in the same order.
	direct := make([]*redis.Client, len(nodes))
	for i, nd := range nodes {
		direct[i] = redis.NewClient(&redis.Options{Addr: nd.Addr()})
		t.Cleanup(func() { _ = direct[i].Close() })
	}
	got := make([]string, len(nodes))
	eventually(t, 30*time.Second, "every node ran every script", func() bool {
		for i, c := range direct {
			got[i], _ = c.Get(ctx, key).Result()
			if len(got[i]) < want.Len() {
				return false
			}
		}
		return true
	})
	for i, g := range got {
		if g != want.String() {
			t.Errorf("node %d holds %q, one Redis would hold %q (all nodes: %q)", i, g, want.String(), got)
		}
	}
}
