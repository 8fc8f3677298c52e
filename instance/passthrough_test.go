package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/tlstest"
	"github.com/redis/go-redis/v9"
)

// passthroughSetup is a data redis-server, three lock nodes and lockproxy
// forwarding to the data Redis with lock keys lockKeys; direct talks to
// each lock node.
type passthroughSetup struct {
	in     *instance.Instance
	data   *redistest.Server
	nodes  []*redistest.Server
	direct []*redis.Client
}

func startPassthrough(t *testing.T, lockKeys ...string) passthroughSetup {
	t.Helper()
	return startPassthroughWith(t, func(*instance.Config) {}, lockKeys...)
}

// startPassthroughWith is startPassthrough with the config changed by edit
// before lockproxy starts.
func startPassthroughWith(t *testing.T, edit func(*instance.Config), lockKeys ...string) passthroughSetup {
	t.Helper()
	data := redistest.Start(t, redistest.Options{})
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Passthrough.Address = data.Addr()
	cfg.Passthrough.LockKeys = lockKeys
	edit(&cfg)
	p := passthroughSetup{in: startInstance(t, cfg), data: data, nodes: nodes}
	for _, n := range nodes {
		p.direct = append(p.direct, newClient(t, n.Addr(), 2))
	}
	return p
}

// onLockNodes is how many lock nodes hold lock key (the nodes keep it as the
// key itself).
func (p passthroughSetup) onLockNodes(key string) int {
	n := 0
	for _, c := range p.direct {
		if c.Exists(context.Background(), key).Val() == 1 {
			n++
		}
	}
	return n
}

// waitOffLockNodes waits until no lock node holds key: a release answers
// once a majority of the nodes let go; the last one may still be on its
// way.
func (p passthroughSetup) waitOffLockNodes(t *testing.T, key, what string) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() bool { return p.onLockNodes(key) == 0 })
}

// appMix is an application's use of one Redis: cache, counters, a hash, a
// queue with a blocking pop, pub/sub, a transaction, and a lock taken and released
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
	ps := popper.Subscribe(ctx, "news")
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 20*time.Second); err != nil {
		t.Fatalf("SUBSCRIBE: %v", err)
	}
	check("publish", c.Publish(ctx, "news", "hello").Err())
	if m, err := ps.ReceiveMessage(ctx); err != nil || m.Payload != "hello" {
		t.Fatalf("pub/sub message: %v, %v", m, err)
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
	return dumpClient(t, newClient(t, addr, 2))
}

// dumpClient is every key of c's Redis with its value, as text.
func dumpClient(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
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
				if n := p.onLockNodes("lock:job"); n < 2 {
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
			p.waitOffLockNodes(t, "lock:job", "lock:job off the lock nodes after DEL")
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
	if p.onLockNodes("lock:tx") != 0 {
		t.Fatal("an aborted transaction took its lock")
	}
	if err := c.Do(ctx, "SYNC").Err(); err == nil || !strings.Contains(err.Error(), "does not forward") {
		t.Fatalf("SYNC: %v, want a refusal (a replication stream is not relayed)", err)
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
	if d.Exists(ctx, "job").Val() != 0 || d.Get(ctx, "plain").Val() != "v" || p.onLockNodes("job") < 2 {
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

// TestPassthroughLongPipelineOrder: a pipeline with long runs of data
// commands (longer than the most lockproxy sends on before writing their
// replies) between lock commands gets every reply in order, in RESP2 and
// RESP3.
func TestPassthroughLongPipelineOrder(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		c := newClient(t, p.in.Addr(), proto)
		pipe := c.Pipeline()
		var incrs []*redis.IntCmd
		var locks []*redis.BoolCmd
		for i := 0; i < 1200; i++ {
			incrs = append(incrs, pipe.Incr(ctx, fmt.Sprintf("long:%d", proto)))
			if i%300 == 299 {
				locks = append(locks, pipe.SetNX(ctx, fmt.Sprintf("lock:long:%d:%d", proto, i), "t", 10*time.Second))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, cmd := range incrs {
			if cmd.Val() != int64(i+1) {
				t.Fatalf("resp%d: INCR %d answered %d", proto, i, cmd.Val())
			}
		}
		for i, l := range locks {
			if !l.Val() {
				t.Fatalf("resp%d: lock %d not granted: %v", proto, i, l.Err())
			}
		}
	}
}

// TestPassthroughBlockedPopAfterDisconnect: a client blocked in a pop
// through lockproxy goes away; an element pushed afterwards — at once, in a
// race with lockproxy unblocking the data Redis, or after — is still in the
// list, never taken for the client that left. Each pop form, many times.
func TestPassthroughBlockedPopAfterDisconnect(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	data := newClient(t, p.data.Addr(), 2)
	blocked := func() int64 {
		var n int64
		fmt.Sscanf(infoField(data.Info(ctx, "clients").Val(), "blocked_clients"), "%d", &n)
		return n
	}
	forms := []struct {
		args []string
		dump func(k string) string
	}{
		{[]string{"BLPOP", "K", "0"}, func(k string) string { return fmt.Sprint(data.LRange(ctx, k, 0, -1).Val()) }},
		{[]string{"BRPOP", "K", "0"}, func(k string) string { return fmt.Sprint(data.LRange(ctx, k, 0, -1).Val()) }},
		{[]string{"BLMPOP", "0", "1", "K", "LEFT"}, func(k string) string { return fmt.Sprint(data.LRange(ctx, k, 0, -1).Val()) }},
		{[]string{"BZPOPMIN", "K", "0"}, func(k string) string { return fmt.Sprint(data.ZRangeWithScores(ctx, k, 0, -1).Val()) }},
	}
	for f, form := range forms {
		for i := 0; i < 10; i++ {
			key := fmt.Sprintf("queue:%d:%d", f, i)
			args := make([]string, len(form.args))
			for j, a := range form.args {
				args[j] = strings.ReplaceAll(a, "K", key)
			}
			raw := dialRaw(t, p.in.Addr())
			if i%2 == 1 {
				if got := raw.do("HELLO", "3"); !strings.HasPrefix(got, "[") {
					t.Fatalf("HELLO 3: %s", got)
				}
			}
			var b strings.Builder
			fmt.Fprintf(&b, "*%d\r\n", len(args))
			for _, a := range args {
				fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
			}
			raw.send(b.String())
			eventually(t, 20*time.Second, "the pop blocks on the data Redis", func() bool { return blocked() == 1 })
			raw.c.Close()
			if i >= 5 { // the other half pushes once lockproxy unblocked the data Redis
				eventually(t, 20*time.Second, "the data Redis unblocked", func() bool { return blocked() == 0 })
			}
			if args[0] == "BZPOPMIN" {
				data.ZAdd(ctx, key, redis.Z{Score: 1, Member: "job"})
			} else {
				data.RPush(ctx, key, "job")
			}
			// If the pop won the race, lockproxy puts the element back.
			eventually(t, 20*time.Second, key+" holds the element", func() bool { return form.dump(key) != "[]" })
			eventually(t, 20*time.Second, "lockproxy done with the pop", func() bool { return blocked() == 0 })
			if got := form.dump(key); got != "[job]" && got != "[{1 job}]" {
				t.Fatalf("%v: %s holds %s, want the one element pushed", args, key, got)
			}
		}
	}
}

// infoField is one field's value in an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// TestPassthroughTLS: with a data redis-server that speaks TLS only and
// requires a client certificate, the application's mix through lockproxy
// leaves the same data as on a plain Redis; lockproxy configured with a CA
// that does not trust the data Redis gets an error naming it for data
// commands, and its locks keep working.
func TestPassthroughTLS(t *testing.T) {
	ca, stranger := tlstest.NewCA(t, "data"), tlstest.NewCA(t, "stranger")
	srvFiles, cliFiles := ca.Server(t, "server"), ca.Client(t, "client", "lockproxy-client")
	data := redistest.Start(t, redistest.Options{TLS: &redistest.TLS{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key,
		CAFile: ca.File, AuthClients: true, Client: clientTLS(t, ca, &cliFiles)}})
	nodes := redistest.StartN(t, 3, redistest.Options{})
	plain := redistest.Start(t, redistest.Options{})
	appMix(t, plain.Addr(), 2, func() {})

	cfg := testConfig(nodes)
	cfg.Passthrough.Address, cfg.Passthrough.LockKeys = data.Addr(), []string{"lock:*"}
	cfg.Passthrough.TLS = instance.NodeTLS{Enabled: true, CAFile: ca.File, CertFile: cliFiles.Cert, KeyFile: cliFiles.Key}
	in := startInstance(t, cfg)
	appMix(t, in.Addr(), 2, func() {})
	direct := redis.NewClient(&redis.Options{Addr: data.Addr(), TLSConfig: clientTLS(t, ca, &cliFiles)})
	defer direct.Close()
	if want, got := dumpData(t, plain.Addr()), dumpClient(t, direct); want != got || !strings.Contains(got, "counter:hits") {
		t.Fatalf("data through lockproxy over TLS:\n%s\nwant, as on a plain Redis:\n%s", got, want)
	}

	cfg.Passthrough.TLS.CAFile = stranger.File
	distrust := startInstance(t, cfg)
	c := newClient(t, distrust.Addr(), 2)
	ctx := context.Background()
	err := c.Get(ctx, "cache:a").Err()
	if err == nil || !strings.Contains(err.Error(), "data Redis "+data.Addr()+" unavailable") || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("GET through lockproxy distrusting the data Redis: %v, want an error naming it and the certificate", err)
	}
	if ok, err := c.SetNX(ctx, "lock:tls", "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET lock:tls NX with the data Redis unreachable: %v, %v", ok, err)
	}
}

// TestPassthroughLocksFlowAcrossDataRedisRestart: a client takes and
// releases locks without pause while the data Redis is killed and
// restarted; every lock cycle succeeds, some of them while the data Redis
// is down, and INFO shows both sides throughout: the lock nodes healthy,
// the data Redis's forwarding failures counted.
func TestPassthroughLocksFlowAcrossDataRedisRestart(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	locker, c := newClient(t, p.in.Addr(), 2), newClient(t, p.in.Addr(), 2)
	var cycles atomic.Int64
	stop := make(chan struct{})
	failed := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(2 * time.Minute)
		for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("lock:flow:%d", i%8)
			ok, err := locker.SetNX(ctx, key, "t", 10*time.Second).Result()
			if err == nil && !ok {
				err = fmt.Errorf("SET %s NX refused", key)
			}
			if err == nil {
				err = locker.Del(ctx, key).Err()
			}
			if err != nil {
				failed <- err
				return
			}
			cycles.Add(1)
		}
	}()
	eventually(t, 30*time.Second, "locks flow", func() bool { return cycles.Load() > 5 })
	if err := p.data.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "cache:x").Err(); err == nil || !strings.Contains(err.Error(), p.data.Addr()) {
		t.Fatalf("GET with the data Redis down: %v, want an error naming it", err)
	}
	downAt := cycles.Load()
	eventually(t, 30*time.Second, "locks flow while the data Redis is down", func() bool { return cycles.Load() > downAt+5 })
	info := c.Info(ctx).Val()
	if !strings.Contains(info, "# Nodes\r\nnodes:3\r\nnodes_up:3") || !strings.Contains(info, "data_redis:"+p.data.Addr()) ||
		strings.Contains(info, "forward_failures:0\r\n") {
		t.Fatalf("INFO with the data Redis down:\n%s", info)
	}
	if err := p.data.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "data commands work after the restart", func() bool {
		return c.Set(ctx, "cache:y", "2", 0).Err() == nil
	})
	upAt := cycles.Load()
	eventually(t, 30*time.Second, "locks flow after the restart", func() bool { return cycles.Load() > upAt+5 })
	close(stop)
	<-done
	select {
	case err := <-failed:
		t.Fatalf("a lock cycle failed around the data Redis's restart: %v", err)
	default:
	}
}

// TestReloadPassthroughCA: Reload (SIGHUP) re-reads [passthrough.tls]'s
// files like the nodes' — even when the CA file's size and modification
// time did not change — and new connections to the data Redis verify
// against the new content: with a foreign CA, data commands fail naming
// the certificate while locks keep working; with the data Redis's CA
// back, they succeed again.
func TestReloadPassthroughCA(t *testing.T) {
	ca, other := tlstest.NewCA(t, "data"), tlstest.NewCA(t, "other")
	srv := ca.Server(t, "server")
	data := redistest.Start(t, redistest.Options{TLS: &redistest.TLS{
		CertFile: srv.Cert, KeyFile: srv.Key, CAFile: ca.File, Client: clientTLS(t, ca, nil)}})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	b, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, append(b, bytes.Repeat([]byte("\n"), 64)...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Passthrough.Address, cfg.Passthrough.LockKeys = data.Addr(), []string{"lock:*"}
	cfg.Passthrough.TLS = instance.NodeTLS{Enabled: true, CAFile: caFile}
	cfg.Passthrough.TimeoutMS = 2000
	in := startInstance(t, cfg)
	c := newClient(t, in.Addr(), 2)
	ctx := context.Background()
	// dropDataConns closes lockproxy's connections to the data Redis, so
	// that the next commands dial anew.
	dropDataConns := func() {
		raw := redis.NewClient(&redis.Options{Addr: data.Addr(), TLSConfig: clientTLS(t, ca, nil)})
		defer raw.Close()
		if err := raw.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatalf("CLIENT KILL on the data Redis: %v", err)
		}
	}
	served := func() bool { return c.Set(ctx, "cache:r", "v", 0).Err() == nil }
	if !served() {
		t.Fatal("SET through lockproxy over TLS failed at the start")
	}

	sameStampCopy(t, other.File, caFile)
	time.Sleep(1100 * time.Millisecond) // past the change check's period, which must still see no change
	dropDataConns()
	eventually(t, 30*time.Second, "data commands served over new connections before the reload", served)

	applied, _, err := in.Reload(cfg)
	if err != nil || !slices.Contains(applied, "tls files") {
		t.Fatalf("reload: applied %v, %v", applied, err)
	}
	dropDataConns()
	eventually(t, 30*time.Second, "data commands refused once new connections verify against the foreign CA", func() bool {
		err := c.Set(ctx, "cache:r", "v", 0).Err()
		return err != nil && strings.Contains(err.Error(), "certificate")
	})
	if ok, err := c.SetNX(ctx, "lock:r", "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET lock:r NX while the data Redis is distrusted: %v, %v", ok, err)
	}

	sameStampCopy(t, ca.File, caFile)
	if _, _, err := in.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "data commands served with the data Redis's CA back", served)
}
