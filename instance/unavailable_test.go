package instance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/zktest"
)

// TestUnavailableCounted: with its ZooKeeper gone, LOCK gets -UNAVAILABLE
// (never a grant or a null), the connection stays usable, /metrics counts
// the refusal under outcome "unavailable" and /readyz says not ready.
func TestUnavailableCounted(t *testing.T) {
	zk := zktest.Start(t)
	cfg := zkConfig(zk)
	cfg.MetricsListen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	c := newClient(t, in.Addr(), 2)
	mustLock(t, c, uniqueKey(t), "PX", 5000)
	if err := zk.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "LOCK answered -UNAVAILABLE", func() bool {
		_, ok, err := lock(t.Context(), c, uniqueKey(t), "PX", 5000)
		if ok {
			t.Fatal("LOCK granted with ZooKeeper down")
		}
		return err != nil && strings.HasPrefix(err.Error(), "UNAVAILABLE")
	})
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after UNAVAILABLE: %v", err)
	}
	_, m := httpGet(t, in.MetricsAddr(), "/metrics")
	if v := metricValue(m, `lockproxy_backend_failures_total{op="acquire",outcome="unavailable"}`); v < 1 {
		t.Errorf(`lockproxy_backend_failures_total{op="acquire",outcome="unavailable"} = %v, want at least 1`, v)
	}
	if code, body := httpGet(t, in.MetricsAddr(), "/readyz"); code != 503 {
		t.Errorf("/readyz with ZooKeeper down: %d %q", code, body)
	}
}
