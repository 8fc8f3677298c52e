package instance_test

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestClockJumpVisible: a lease held on exactly two of three nodes (the
// third was down when it was granted); one of the two steps its wall clock
// +10 s (internal/clockshim). The holder is pushed "locklost <key> node
// clock jumped" without asking, and its next command about the key gets
// -LOCKLOST; INFO nodes, /readyz, /metrics and the log say which node
// jumped, and it is held out.
func TestClockJumpVisible(t *testing.T) {
	nodes, clock, cfg := clockNodes(t)
	cfg.MetricsListen = "127.0.0.1:0"
	core, logs := observer.New(zap.InfoLevel)
	in, err := instance.Start(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Shutdown(t.Context()) })
	c := newClient(t, in.Addr(), 2)
	infoNodes := func() string { return c.Do(t.Context(), "INFO", "nodes").String() }
	eventually(t, 20*time.Second, "every node counted", func() bool { return strings.Contains(infoNodes(), "status:ok") })

	if err := nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	holder := dialRESP3(t, in.Addr())
	parseGrant(t, holder.do("LOCK", key, "PX", "5000", "TOKEN", "tok"))
	if err := nodes[2].Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "node 2 counted again", func() bool { return strings.Contains(infoNodes(), "status:ok") })

	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	stepped := time.Now()
	if p := holder.push(); p != lostPush(key, "node clock jumped") {
		t.Fatalf("push %q, want %q", p, lostPush(key, "node clock jumped"))
	}
	t.Logf("holder told %v after the step", time.Since(stepped))
	if r := holder.do("RENEW", key, "tok"); !strings.HasPrefix(r, "-LOCKLOST") || !strings.Contains(r, "wall clock of a Redis node it relied on jumped") {
		t.Fatalf("RENEW after the loss: %s", r)
	}
	s := infoNodes()
	for _, want := range []string{"clock_jumps:1\r\n", "node0:addr=" + nodes[0].Addr() + ",state=not_counted,error=node clock jumped +", ",clock_jumps=1"} {
		if !strings.Contains(s, want) {
			t.Fatalf("INFO nodes lacks %q:\n%s", want, s)
		}
	}
	// Node 2's restart may show in the probes only now: wait for it to answer.
	eventually(t, 10*time.Second, "/readyz degraded, naming the node that jumped", func() bool {
		code, body := httpGet(t, in.MetricsAddr(), "/readyz")
		return code == 200 && strings.HasPrefix(body, "degraded") && strings.Contains(body, nodes[0].Addr()+": not counted: node clock jumped +")
	})
	_, m := httpGet(t, in.MetricsAddr(), "/metrics")
	if v := metricValue(m, `lockproxy_node_clock_jumps_total{node="`+nodes[0].Addr()+`"}`); v != 1 {
		t.Fatalf("lockproxy_node_clock_jumps_total for the node: %v", v)
	}
	if v := metricValue(m, `lockproxy_node_counted{node="`+nodes[0].Addr()+`"}`); v != 0 {
		t.Fatalf("lockproxy_node_counted for the node: %v", v)
	}
	if n := logs.FilterMessageSnippet("wall clock jumped").FilterField(zap.String("node", nodes[0].Addr())).Len(); n != 1 {
		t.Fatalf("%d log entries for the jump, want 1", n)
	}
}

// clockNodes starts three durable redis-servers (counted at once), the
// first under a wall-clock shim, and a config over them whose leases are
// at most 5 s.
func clockNodes(t *testing.T) ([]*redistest.Server, *clockshim.Clock, instance.Config) {
	t.Helper()
	durable := redistest.Options{AppendFsyncAlways: true}
	jumper, clock := clockshim.StartRedis(t, durable)
	nodes := append([]*redistest.Server{jumper}, redistest.StartN(t, 2, durable)...)
	cfg := testConfig(nodes)
	cfg.Redlock.MaxLeaseMS = 5000
	return nodes, clock, cfg
}
