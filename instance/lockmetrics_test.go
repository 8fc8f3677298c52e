package instance_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestLockMetrics: /metrics shows acquire and release latency by outcome,
// refusals, NOQUORUM, held locks by mode, waiters and the build.
func TestLockMetrics(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.MetricsListen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	metrics := func() string { _, b := httpGet(t, in.MetricsAddr(), "/metrics"); return b }
	value := func(series string) float64 { return metricValue(metrics(), series) }
	a, b := newClient(t, in.Addr(), 2), newClient(t, in.Addr(), 2)
	bound, lease := uniqueKey(t), uniqueKey(t)

	mustLock(t, a, bound)
	g := mustLock(t, a, lease, "PX", 60000)
	if _, ok, err := lock(t.Context(), b, lease, "PX", 60000); ok || err != nil {
		t.Fatalf("second LOCK granted=%v err=%v", ok, err)
	}
	m := metrics()
	for series, want := range map[string]float64{
		`lockproxy_backend_op_duration_seconds_count{op="acquire",outcome="granted"}`: 2,
		`lockproxy_backend_op_duration_seconds_count{op="acquire",outcome="refused"}`: 1,
		`lockproxy_backend_failures_total{op="acquire",outcome="refused"}`:            1,
		`lockproxy_held_locks{mode="bound"}`:                                          1,
		`lockproxy_held_locks{mode="lease"}`:                                          1,
		`lockproxy_waiters`:                                                           0,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	build := `lockproxy_build_info{backend="redlock",goversion="` + runtime.Version() + `",version="`
	if !strings.Contains(m, build) {
		t.Errorf("/metrics lacks %s...", build)
	}

	waiting := make(chan error, 1)
	go func() { _, _, err := lock(t.Context(), b, lease, "PX", 60000, "WAIT", 60000); waiting <- err }()
	eventually(t, 20*time.Second, "one waiter", func() bool { return value("lockproxy_waiters") == 1 })
	if n, err := a.Do(t.Context(), "UNLOCK", lease, g.token).Int(); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	if v := value(`lockproxy_backend_op_duration_seconds_count{op="release",outcome="released"}`); v != 1 {
		t.Errorf("releases: %v", v)
	}
	if v := value("lockproxy_waiters"); v != 0 {
		t.Errorf("waiters after the grant: %v", v)
	}

	nodes[0].Kill()
	nodes[1].Kill()
	if _, _, err := lock(t.Context(), a, uniqueKey(t), "PX", 60000); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("LOCK with two nodes down: %v", err)
	}
	if v := value(`lockproxy_backend_failures_total{op="acquire",outcome="noquorum"}`); v != 1 {
		t.Errorf("noquorum acquires: %v", v)
	}
}
