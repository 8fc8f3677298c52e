package instance_test

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// passthroughSetup is a data redis-server, three lock nodes and lockproxy
// forwarding to the data Redis with lock keys lockKeys.
type passthroughSetup struct {
	in    *instance.Instance
	data  *redistest.Server
	nodes []*redistest.Server
}

func startPassthrough(t *testing.T, lockKeys ...string) passthroughSetup {
	t.Helper()
	data := redistest.Start(t, redistest.Options{})
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Passthrough.Address = data.Addr()
	cfg.Passthrough.LockKeys = lockKeys
	return passthroughSetup{in: startInstance(t, cfg), data: data, nodes: nodes}
}

// onLockNodes is how many lock nodes hold lock key (the nodes keep it under
// key_prefix + "lock:").
func (p passthroughSetup) onLockNodes(t *testing.T, key string) int {
	t.Helper()
	n := 0
	for _, node := range p.nodes {
		c := newClient(t, node.Addr(), 2)
		if c.Exists(context.Background(), "lockproxy:lock:"+key).Val() == 1 {
			n++
		}
	}
	return n
}

// appMix is an application's use of one Redis: cache, counters, a hash, a
// queue with a blocking pop, a transaction, and a lock taken and released
// with SET NX / DEL. lockHeld runs while the lock is held.
func appMix(t *testing.T, addr string, proto int, lockHeld func()) {
	t.Helper()
	ctx := context.Background()
	c, popper := newClient(t, addr, proto), newClient(t, addr, proto)
	check := func(what string, err error) {
		t.Helper()
		if err != nil && err != redis.Nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	check("set", c.Set(ctx, "cache:a", "1", 0).Err())
	if v, err := c.Get(ctx, "cache:a").Result(); err != nil || v != "1" {
		t.Fatalf("GET cache:a = %q, %v", v, err)
	}
	for i := 0; i < 5; i++ {
		check("incr", c.Incr(ctx, "counter:hits").Err())
	}
	check("hset", c.HSet(ctx, "user:1", "name", "ada", "age", "36").Err())
	popped := make(chan []string, 1)
	go func() {
		v, _ := popper.BLPop(ctx, 30*time.Second, "queue:jobs").Result()
		popped <- v
	}()
	check("rpush", c.RPush(ctx, "queue:jobs", "job1", "job2").Err())
	if v := <-popped; len(v) != 2 || v[1] != "job1" {
		t.Fatalf("BLPOP = %q", v)
	}
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "counter:tx")
		p.Set(ctx, "cache:tx", "done", 0)
		return nil
	})
	check("transaction", err)
	ok, err := c.SetNX(ctx, "lock:job", "me", 10*time.Second).Result()
	if err != nil || !ok {
		t.Fatalf("SET lock:job NX = %v, %v", ok, err)
	}
	if ok, _ := c.SetNX(ctx, "lock:job", "other", 10*time.Second).Result(); ok {
		t.Fatal("a second SET NX on a held lock succeeded")
	}
	lockHeld()
	check("del lock", c.Del(ctx, "lock:job").Err())
	check("set after", c.Set(ctx, "cache:b", "2", 0).Err())
}

// dumpData is every key of addr with its value, as text.
func dumpData(t *testing.T, addr string) string {
	t.Helper()
	ctx := context.Background()
	c := newClient(t, addr, 2)
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		switch typ := c.Type(ctx, k).Val(); typ {
		case "string":
			fmt.Fprintf(&b, "%s=%q\n", k, c.Get(ctx, k).Val())
		case "hash":
			fmt.Fprintf(&b, "%s=%v\n", k, c.HGetAll(ctx, k).Val())
		case "list":
			fmt.Fprintf(&b, "%s=%q\n", k, c.LRange(ctx, k, 0, -1).Val())
		default:
			fmt.Fprintf(&b, "%s:%s\n", k, typ)
		}
	}
	return b.String()
}

// TestPassthroughAppMix runs the same application against one plain Redis
// and through lockproxy: the data ends identical, and the lock lived on the
// lock nodes' quorum, never in the data Redis.
func TestPassthroughAppMix(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprint("resp", proto), func(t *testing.T) {
			plain := redistest.Start(t, redistest.Options{})
			appMix(t, plain.Addr(), proto, func() {})
			p := startPassthrough(t, "lock:*")
			appMix(t, p.in.Addr(), proto, func() {
				if n := p.onLockNodes(t, "lock:job"); n < 2 {
					t.Errorf("lock:job is on %d of 3 lock nodes, want a quorum", n)
				}
				if n := newClient(t, p.data.Addr(), 2).Exists(context.Background(), "lock:job").Val(); n != 0 {
					t.Error("lock:job is in the data Redis")
				}
			})
			want, got := dumpData(t, plain.Addr()), dumpData(t, p.data.Addr())
			if want != got || !strings.Contains(got, "counter:hits") {
				t.Fatalf("data through lockproxy:\n%s\nwant, as on a plain Redis:\n%s", got, want)
			}
			if p.onLockNodes(t, "lock:job") != 0 {
				t.Error("lock:job still on the lock nodes after DEL")
			}
		})
	}
}

// TestPassthroughPipelineOrder: a pipeline alternating lock and data
// commands gets every reply, in order.
func TestPassthroughPipelineOrder(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	for _, proto := range []int{2, 3} {
		ctx := context.Background()
		c := newClient(t, p.in.Addr(), proto)
		pipe := c.Pipeline()
		var locks []*redis.BoolCmd
		var data []*redis.IntCmd
		for i := 0; i < 50; i++ {
			locks = append(locks, pipe.SetNX(ctx, fmt.Sprintf("lock:%d:%d", proto, i), "t", 10*time.Second))
			data = append(data, pipe.Incr(ctx, fmt.Sprintf("n:%d", proto)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range locks {
			if !locks[i].Val() || data[i].Val() != int64(i+1) {
				t.Fatalf("resp%d reply %d: lock %v, INCR %d (want true, %d)", proto, i, locks[i].Val(), data[i].Val(), i+1)
			}
		}
	}
}

// TestPassthroughRefusesMixedKeys: a command or transaction naming both
// kinds of key is refused whole, and the connection stays usable.
func TestPassthroughRefusesMixedKeys(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	c := newClient(t, p.in.Addr(), 2)
	c.Set(ctx, "cache:b", "v", 0)
	for _, args := range [][]any{{"DEL", "lock:a", "cache:b"}, {"MGET", "cache:b", "lock:a"}, {"EVAL", "return 1", "2", "lock:a", "cache:b"}} {
		if err := c.Do(ctx, args...).Err(); err == nil || !strings.Contains(err.Error(), "both lock keys and data keys") {
			t.Errorf("%v: err %v, want the mixed-keys error", args, err)
		}
	}
	if v := newClient(t, p.data.Addr(), 2).Get(ctx, "cache:b").Val(); v != "v" {
		t.Fatalf("cache:b = %q after a refused DEL", v)
	}
	_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "cache:tx", "1", 0)
		pipe.SetNX(ctx, "lock:tx", "t", time.Minute)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "EXECABORT") {
		t.Fatalf("transaction with a lock command: %v, want EXECABORT", err)
	}
	if n := newClient(t, p.data.Addr(), 2).Exists(ctx, "cache:tx", "lock:tx").Val(); n != 0 {
		t.Fatal("an aborted transaction left keys in the data Redis")
	}
	if p.onLockNodes(t, "lock:tx") != 0 {
		t.Fatal("an aborted transaction took its lock")
	}
	if err := c.Do(ctx, "SUBSCRIBE", "news").Err(); err == nil || !strings.Contains(err.Error(), "does not forward") {
		t.Fatalf("SUBSCRIBE: %v, want a refusal (pub/sub is not relayed)", err)
	}
	if v, err := c.Get(ctx, "cache:b").Result(); err != nil || v != "v" {
		t.Fatalf("connection not usable after refusals: %q, %v", v, err)
	}
}

// TestPassthroughDataRedisDown: with the data Redis killed, data commands
// get an error naming it while locks keep working; after its restart, data
// commands work again on the same connection.
func TestPassthroughDataRedisDown(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	c := newClient(t, p.in.Addr(), 2)
	if err := c.Set(ctx, "cache:x", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.data.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := c.Get(ctx, "cache:x").Err(); err == nil || !strings.Contains(err.Error(), p.data.Addr()) {
			t.Fatalf("GET with the data Redis down: %v, want an error naming %s", err, p.data.Addr())
		}
		key := fmt.Sprintf("lock:down:%d", i)
		if ok, err := c.SetNX(ctx, key, "t", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("lock with the data Redis down: %v, %v", ok, err)
		}
		if err := c.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.data.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "data commands work after the restart", func() bool {
		return c.Set(ctx, "cache:y", "2", 0).Err() == nil
	})
}

// TestPassthroughLockNodeDown: a lock node killed while data commands flow
// does not disturb them, and locks keep their quorum.
func TestPassthroughLockNodeDown(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	c := newClient(t, p.in.Addr(), 2)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 500; i++ {
			if err := c.Incr(ctx, "counter:flow").Err(); err != nil {
				errs <- err
				return
			}
		}
	}()
	if err := p.nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.SetNX(ctx, "lock:n", "t", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("lock with one node down: %v, %v", ok, err)
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if n := c.Get(ctx, "counter:flow").Val(); n != "500" {
		t.Fatalf("counter = %s, want 500", n)
	}
}

// TestPassthroughNoLockKeys: without patterns SET NX is a lock and every
// other command is data.
func TestPassthroughNoLockKeys(t *testing.T) {
	p := startPassthrough(t)
	ctx := context.Background()
	c := newClient(t, p.in.Addr(), 2)
	if ok, err := c.SetNX(ctx, "job", "t", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v, %v", ok, err)
	}
	if err := c.Set(ctx, "plain", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	d := newClient(t, p.data.Addr(), 2)
	if d.Exists(ctx, "job").Val() != 0 || d.Get(ctx, "plain").Val() != "v" || p.onLockNodes(t, "job") < 2 {
		t.Fatal("SET NX did not go to the lock nodes, or SET not to the data Redis")
	}
}

// TestPassthroughInfoMetrics: INFO names the data Redis and /metrics counts
// forwarded commands and failures.
func TestPassthroughInfoMetrics(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Passthrough.Address = data.Addr()
	cfg.MetricsListen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	ctx := context.Background()
	c := newClient(t, in.Addr(), 2)
	for i := 0; i < 3; i++ {
		c.Incr(ctx, "n")
	}
	info := c.Info(ctx, "passthrough").Val()
	if !strings.Contains(info, "data_redis:"+data.Addr()) || !strings.Contains(info, "forwarded_commands:3") {
		t.Fatalf("INFO passthrough:\n%s", info)
	}
	if err := data.Kill(); err != nil {
		t.Fatal(err)
	}
	c.Incr(ctx, "n")
	_, body := httpGet(t, in.MetricsAddr(), "/metrics")
	for _, want := range []string{"lockproxy_forwarded_commands_total 4", "lockproxy_forward_failures_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestPassthroughRedisPyMix runs the application mix with redis-py
// (testdata/compat/python/mix.py) on a plain Redis and through lockproxy:
// the data ends identical and redis-py's Lock lived on the lock nodes.
func TestPassthroughRedisPyMix(t *testing.T) {
	// Debian's redis-py speaks RESP2 only; go-redis covers RESP3.
	plain := redistest.Start(t, redistest.Options{})
	compatRunScript(t, "testdata/compat/python", systemPython, "mix.py", plain.Addr())
	p := startPassthrough(t, "lock:*")
	args := []string{"mix.py", p.in.Addr(), p.data.Addr()}
	for _, n := range p.nodes {
		args = append(args, n.Addr())
	}
	compatRunScript(t, "testdata/compat/python", systemPython, args...)
	if want, got := dumpData(t, plain.Addr()), dumpData(t, p.data.Addr()); want != got || got == "" {
		t.Fatalf("data through lockproxy:\n%s\nwant, as on a plain Redis:\n%s", got, want)
	}
}

// TestPassthroughIoredisMix runs the application mix with ioredis and
// node-redlock (testdata/compat/node/mix.js), as TestPassthroughRedisPyMix.
func TestPassthroughIoredisMix(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	if nodeModulesStale() != "" {
		npmCI(t)
	}
	plain := redistest.Start(t, redistest.Options{})
	compatRunScript(t, nodeCompatDir, node, "mix.js", plain.Addr())
	p := startPassthrough(t, "lock:*")
	args := []string{"mix.js", p.in.Addr(), p.data.Addr()}
	for _, n := range p.nodes {
		args = append(args, n.Addr())
	}
	compatRunScript(t, nodeCompatDir, node, args...)
	if want, got := dumpData(t, plain.Addr()), dumpData(t, p.data.Addr()); want != got || got == "" {
		t.Fatalf("data through lockproxy:\n%s\nwant, as on a plain Redis:\n%s", got, want)
	}
}
