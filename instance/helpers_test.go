package instance_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/zktest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// keySeq makes every test's keys unique.
var keySeq atomic.Int64

func uniqueKey(t *testing.T) string {
	return t.Name() + ":" + time.Now().Format("150405.000000") + ":" + string(rune('a'+keySeq.Add(1)%26))
}

// testConfig is a redlock config over nodes on a free loopback port, with a
// short bound lease so watchdog behaviour shows within a test. The restart
// rule is off: the tests' nodes start fresh and without fsync, so the rule
// would count none of them for the longest lease (TestRestartRuleVisible
// and upstream's restart tests run with it).
func testConfig(nodes []*redistest.Server) instance.Config {
	cfg := instance.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Backend = "redlock"
	cfg.Locks.BoundLeaseMS = 1500
	cfg.Redlock.MaxLeaseMS = 0
	for _, n := range nodes {
		cfg.Redlock.Nodes = append(cfg.Redlock.Nodes, n.Addr())
	}
	return cfg
}

// backendCase is one lock backend the conformance tests run against.
type backendCase struct {
	name string
	// config starts the backend's servers for the test and returns the
	// config of an instance over them; instances sharing it share locks.
	config func(t *testing.T) instance.Config
}

// backends are the backends every conformance test runs against — the
// same test, the backend a parameter — so that their behaviour cannot
// drift apart.
var backends = []backendCase{
	{"redlock", func(t *testing.T) instance.Config { return testConfig(redistest.StartN(t, 3, redistest.Options{})) }},
	{"zookeeper", func(t *testing.T) instance.Config { return zkConfig(zktest.Start(t)) }},
}

// zkConfig is a zookeeper config over zk with the short bound lease of
// testConfig. Its session timeout is 4 s: go-zookeeper drops a connection
// that is silent for two thirds of it, and with 2 s a loaded machine
// (ZooKeeper's JVM and a -race test binary sharing two cores) stalled that
// long and turned a compat test's lock into UNAVAILABLE.
func zkConfig(zk *zktest.Server) instance.Config {
	cfg := testConfig(nil)
	cfg.Backend = "zookeeper"
	cfg.ZooKeeper.Servers = []string{zk.Addr()}
	cfg.ZooKeeper.SessionTimeoutMS = 4000
	return cfg
}

// eachBackend runs test once per backend, as a subtest named after it.
func eachBackend(t *testing.T, test func(t *testing.T, cfg instance.Config)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b.config(t)) })
	}
}

// startInstance runs lockproxy in-process and drains it when the test ends.
func startInstance(t *testing.T, cfg instance.Config) *instance.Instance {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	if os.Getenv("LOCKPROXY_TEST_LOG") != "" {
		log = zaptest.NewLogger(t)
	}
	in, err := instance.Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := in.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if cfg.BackendName() == "zookeeper" {
		waitZooKeeperSession(t, in.Addr())
	}
	return in
}

// waitZooKeeperSession polls addr until a lock read is no longer refused
// for want of a ZooKeeper session. Start waits only 5 s for the session
// and then serves anyway (an ensemble that is down is waited for in the
// background); a loaded machine can take longer to connect, and a test's
// first command would then be refused. Any other reply (a time, NOAUTH)
// ends the wait.
func waitZooKeeperSession(t *testing.T, addr string) {
	t.Helper()
	c := dialRaw(t, addr)
	defer c.c.Close()
	eventually(t, 60*time.Second, "a ZooKeeper session (PTTL not -UNAVAILABLE)", func() bool {
		return !strings.HasPrefix(c.do("PTTL", "lockproxy:test-ready"), "-UNAVAILABLE")
	})
}

// startRedlock starts n real redis-servers and one lockproxy over them.
func startRedlock(t *testing.T, n int) (*instance.Instance, []*redistest.Server) {
	t.Helper()
	nodes := redistest.StartN(t, n, redistest.Options{})
	return startInstance(t, testConfig(nodes)), nodes
}

// newClient is a go-redis client of addr speaking protocol proto (2 or 3).
func newClient(t *testing.T, addr string, proto int) *redis.Client {
	t.Helper()
	// A read timeout longer than any LOCK ... WAIT the tests send (60 s):
	// go-redis's 3 s default cut waiters off while others queued on a
	// loaded machine (TestWaitFIFO: i/o timeout).
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1, ReadTimeout: 90 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// lockReply is LOCK's answer.
type lockReply struct {
	token    string
	fence    int64
	validity int64
}

// lock sends LOCK args... and decodes the reply; ok is false on a null.
func lock(ctx context.Context, c *redis.Client, args ...any) (lockReply, bool, error) {
	v, err := c.Do(ctx, append([]any{"LOCK"}, args...)...).Slice()
	if err == redis.Nil {
		return lockReply{}, false, nil
	}
	if err != nil {
		return lockReply{}, false, err
	}
	return lockReply{token: v[0].(string), fence: v[1].(int64), validity: v[2].(int64)}, true, nil
}

// mustLock fails the test unless LOCK is granted.
func mustLock(t *testing.T, c *redis.Client, args ...any) lockReply {
	t.Helper()
	r, ok, err := lock(context.Background(), c, args...)
	if err != nil || !ok {
		t.Fatalf("LOCK %v: granted=%v err=%v", args, ok, err)
	}
	return r
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// quietLogger is a test logger for instances a test shuts down itself.
func quietLogger(t *testing.T) *zap.Logger { return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)) }
