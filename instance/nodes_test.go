package instance_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// httpGet fetches path from addr and returns the status and body.
func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNodeVisibility: one node of three killed shows as degraded in
// /readyz (still 200), INFO nodes, /metrics and one warning in the log;
// restarted, all is healthy again and the log says so; two killed is 503.
func TestNodeVisibility(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.MetricsListen = "127.0.0.1:0"
	core, logs := observer.New(zap.InfoLevel)
	in, err := instance.Start(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Shutdown(t.Context()) })
	c := newClient(t, in.Addr(), 2)
	ready := func() (int, string) { return httpGet(t, in.MetricsAddr(), "/readyz") }
	metrics := func() string { _, b := httpGet(t, in.MetricsAddr(), "/metrics"); return b }
	infoNodes := func() string { return c.Do(t.Context(), "INFO", "nodes").String() }
	warnings := func(msg string) int {
		return logs.FilterMessage(msg).FilterField(zap.String("node", nodes[0].Addr())).Len()
	}

	if code, body := ready(); code != 200 || !strings.HasPrefix(body, "ready") {
		t.Fatalf("/readyz healthy: %d %q", code, body)
	}
	if s := infoNodes(); !strings.Contains(s, "status:ok") || !strings.Contains(s, "nodes_up:3") {
		t.Fatalf("INFO nodes healthy: %s", s)
	}

	if err := nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	code, body := ready()
	if code != 200 || !strings.HasPrefix(body, "degraded") || !strings.Contains(body, nodes[0].Addr()) {
		t.Fatalf("/readyz one down: %d %q", code, body)
	}
	if s := infoNodes(); !strings.Contains(s, "status:degraded") || !strings.Contains(s, "addr="+nodes[0].Addr()+",state=down") {
		t.Fatalf("INFO nodes one down: %s", s)
	}
	if m := metrics(); !strings.Contains(m, `lockproxy_node_up{node="`+nodes[0].Addr()+`"} 0`) ||
		!strings.Contains(m, `lockproxy_node_up{node="`+nodes[1].Addr()+`"} 1`) ||
		!strings.Contains(m, `lockproxy_node_errors_total{kind="connection",node="`+nodes[0].Addr()+`"}`) {
		t.Fatalf("/metrics one down:\n%s", grepLines(m, "lockproxy_node_"))
	}
	mustLock(t, c, uniqueKey(t), "PX", 5000) // a minority down still grants
	// Several probes later, the transition is still logged once.
	eventually(t, 20*time.Second, "three failed calls to the dead node", func() bool {
		return metricValue(metrics(), `lockproxy_node_errors_total{kind="connection",node="`+nodes[0].Addr()+`"}`) >= 3
	})
	if n := warnings("redis node stopped answering"); n != 1 {
		t.Fatalf("%d 'stopped answering' warnings, want 1", n)
	}

	if err := nodes[0].Restart(); err != nil {
		t.Fatal(err)
	}
	// go-redis redials a failed node within a second or so.
	eventually(t, 20*time.Second, "/readyz ready after the restart", func() bool {
		code, body := ready()
		return code == 200 && strings.HasPrefix(body, "ready")
	})
	if s := infoNodes(); !strings.Contains(s, "status:ok") {
		t.Fatalf("INFO nodes after restart: %s", s)
	}
	if n := warnings("redis node answers again"); n != 1 {
		t.Fatalf("%d 'answers again' warnings, want 1", n)
	}

	nodes[0].Kill()
	nodes[1].Kill()
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready") {
		t.Fatalf("/readyz two down: %d %q", code, body)
	}
	if s := infoNodes(); !strings.Contains(s, "status:noquorum") {
		t.Fatalf("INFO nodes two down: %s", s)
	}
}

// metricValue is the value of the series named exactly series in a
// /metrics page, -1 if absent.
func metricValue(page, series string) float64 {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPausedNodeVisible: a node that keeps its connections but answers
// nothing (SIGSTOP) shows as down with a timeout, and as up once resumed.
func TestPausedNodeVisible(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.MetricsListen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	if err := nodes[2].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nodes[2].Resume() })
	code, body := httpGet(t, in.MetricsAddr(), "/readyz")
	if code != 200 || !strings.HasPrefix(body, "degraded") || !strings.Contains(body, nodes[2].Addr()) {
		t.Fatalf("/readyz one paused: %d %q", code, body)
	}
	_, m := httpGet(t, in.MetricsAddr(), "/metrics")
	if metricValue(m, `lockproxy_node_errors_total{kind="timeout",node="`+nodes[2].Addr()+`"}`) < 1 {
		t.Fatalf("no timeout counted for the paused node:\n%s", grepLines(m, "lockproxy_node_errors"))
	}
	if err := nodes[2].Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "/readyz ready once resumed", func() bool {
		code, body := httpGet(t, in.MetricsAddr(), "/readyz")
		return code == 200 && strings.HasPrefix(body, "ready")
	})
}

// TestRestartRuleVisible: with the restart rule on, a node without fsync
// that started less than redlock.max_lease_ms ago is not counted, and says
// so in INFO nodes, /readyz, /metrics and the log, while the two nodes
// verified durable carry the quorum; with one of those down, LOCK gets
// NOQUORUM naming the node not counted. A TTL above max_lease_ms is refused.
func TestRestartRuleVisible(t *testing.T) {
	nodes := redistest.StartN(t, 2, redistest.Options{AppendFsyncAlways: true})
	nodes = append(nodes, redistest.Start(t, redistest.Options{}))
	cfg := testConfig(nodes)
	cfg.Redlock.MaxLeaseMS = 60000
	cfg.MetricsListen = "127.0.0.1:0"
	core, logs := observer.New(zap.InfoLevel)
	in, err := instance.Start(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Shutdown(t.Context()) })
	c := newClient(t, in.Addr(), 2)
	metrics := func() string { _, b := httpGet(t, in.MetricsAddr(), "/metrics"); return b }
	infoNodes := func() string { return c.Do(t.Context(), "INFO", "nodes").String() }
	fresh := nodes[2].Addr()

	eventually(t, 20*time.Second, "the node without fsync not counted, the others counted", func() bool {
		m := metrics()
		return metricValue(m, `lockproxy_node_counted{node="`+fresh+`"}`) == 0 &&
			metricValue(m, `lockproxy_node_counted{node="`+nodes[0].Addr()+`"}`) == 1 &&
			metricValue(m, `lockproxy_node_counted{node="`+nodes[1].Addr()+`"}`) == 1
	})
	if s := infoNodes(); !strings.Contains(s, "addr="+fresh+",state=not_counted,error=") || !strings.Contains(s, "status:degraded") {
		t.Fatalf("INFO nodes: %s", s)
	}
	if code, body := httpGet(t, in.MetricsAddr(), "/readyz"); code != 200 || !strings.HasPrefix(body, "degraded") || !strings.Contains(body, fresh+": not counted") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if n := logs.FilterMessage("redis node held out: not counted toward any grant or fence").FilterField(zap.String("node", fresh)).Len(); n != 1 {
		t.Fatalf("%d warnings for the node not counted, want 1", n)
	}
	mustLock(t, c, uniqueKey(t), "PX", 5000)
	if err := c.Do(t.Context(), "LOCK", uniqueKey(t), "PX", 60001).Err(); err == nil || !strings.Contains(err.Error(), "max_lease_ms") {
		t.Fatalf("LOCK beyond max_lease_ms: %v", err)
	}
	if err := nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	err = c.Do(t.Context(), "LOCK", uniqueKey(t), "PX", 5000).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") || !strings.Contains(err.Error(), fresh+": not counted: held out for ") {
		t.Fatalf("LOCK with one durable node down and the other not counted: %v", err)
	}
}
