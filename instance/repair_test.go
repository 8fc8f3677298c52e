package instance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// dumps is each node's DUMP of key ("" for no key); a node that does not
// answer within a second (paused) reads as "?".
func dumps(t *testing.T, nodes []*redistest.Server, key string) []string {
	t.Helper()
	out := make([]string, len(nodes))
	for i, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := nodeClient(t, n).Dump(ctx, key).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			out[i] = "?"
		default:
			out[i] = v
		}
	}
	return out
}

// alike reports whether every node answered and holds the same DUMP.
func alike(d []string) bool {
	for _, x := range d {
		if x == "?" || x != d[0] {
			return false
		}
	}
	return true
}

// majorityAlike reports whether a majority of the nodes answered with the
// same DUMP.
func majorityAlike(d []string) bool {
	for _, x := range d {
		n := 0
		for _, y := range d {
			if x != "?" && y == x {
				n++
			}
		}
		if n >= len(d)/2+1 {
			return true
		}
	}
	return false
}

// TestScriptDriftRepaired: a node whose copy of a script's key drifted
// (written on it alone) is given the majority's state by the next script
// that writes the key on every node; a read with one node paused and the
// two others in different states answers NOQUORUM with a read's words,
// and once the drift is repaired the same read answers.
func TestScriptDriftRepaired(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	c := newClient(t, startInstance(t, testConfig(nodes)).Addr(), 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := uniqueKey(t)
	const incr = `return redis.call('HINCRBY', KEYS[1], 'n', 1)`
	const touch = `return redis.call('HSET', KEYS[1], 'm', '1')`
	if n, err := c.Eval(ctx, incr, []string{key}).Int64(); err != nil || n != 1 {
		t.Fatalf("HINCRBY: %v %v", n, err)
	}
	eventually(t, compatWaitBound, "every node holds the hash", func() bool { return alike(dumps(t, nodes, key)) })
	if err := nodeClient(t, nodes[2]).HSet(ctx, key, "n", "7").Err(); err != nil {
		t.Fatal(err)
	}
	// Node 0 paused: nodes 1 and 2 disagree, and neither state has a
	// majority: the read answers NOQUORUM, saying it changed nothing.
	if err := nodes[0].Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := c.HGet(ctx, key, "n").Err()
	t.Logf("HGET with node 0 paused took %v", time.Since(start))
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") || !strings.Contains(err.Error(), "only reads: it changed no node") ||
		strings.Contains(err.Error(), "may have run") {
		t.Errorf("HGET with the two answering nodes in different states: %v, want NOQUORUM in a read's words", err)
	}
	if err := nodes[0].Resume(); err != nil {
		t.Fatal(err)
	}
	// A script that writes the key, once it runs on every node, leaves
	// node 2 with the majority's state.
	eventually(t, 10*time.Second, "a script on every node repairs node 2", func() bool {
		if err := c.Eval(ctx, touch, []string{key}).Err(); err != nil {
			t.Logf("HSET script: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		return alike(dumps(t, nodes, key))
	})
	if v, err := nodeClient(t, nodes[2]).HGet(ctx, key, "n").Result(); err != nil || v != "1" {
		t.Fatalf("node 2 after the repair: %q %v, want the majority's 1", v, err)
	}
	// The same read with node 0 paused now answers.
	if err := nodes[0].Pause(); err != nil {
		t.Fatal(err)
	}
	v, err := c.HGet(ctx, key, "n").Result()
	if rerr := nodes[0].Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || v != "1" {
		t.Fatalf("HGET with node 0 paused after the repair: %q %v, want \"1\"", v, err)
	}
}

// TestScriptDriftNeverOverwritesAMajority: two nodes that agree are never
// changed to the third's state, and with no majority nothing is touched.
func TestScriptDriftNeverOverwritesAMajority(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	c := newClient(t, startInstance(t, testConfig(nodes)).Addr(), 2)
	ctx := compatCtx(t)
	key := uniqueKey(t)
	const touch = `redis.call('HSET', KEYS[1], 'm', '1') return 1`
	// Three different states: no majority; each node keeps its own.
	for i, n := range nodes {
		if err := nodeClient(t, n).HSet(ctx, key, "n", fmt.Sprint(i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Eval(ctx, touch, []string{key}).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	for i, n := range nodes {
		if v, err := nodeClient(t, n).HGet(ctx, key, "n").Result(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("node %d with no majority: %q %v, want its own %d", i, v, err, i)
		}
	}
	// Nodes 1 and 2 agree: node 0 is brought to them, never the reverse.
	if err := nodeClient(t, nodes[1]).HSet(ctx, key, "n", "2").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Eval(ctx, touch, []string{key}).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, compatWaitBound, "node 0 takes the majority's state", func() bool { return alike(dumps(t, nodes, key)) })
	if v, err := nodeClient(t, nodes[0]).HGet(ctx, key, "n").Result(); err != nil || v != "2" {
		t.Fatalf("node 0: %q %v, want the majority's 2", v, err)
	}
}
