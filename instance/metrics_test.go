package instance_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestMetricsAndHealth: /healthz and /readyz answer, and /metrics counts a
// grant and a release.
func TestMetricsAndHealth(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.MetricsListen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	c := newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	g := mustLock(t, c, key, "PX", 5000)
	if n, err := c.Do(t.Context(), "UNLOCK", key, g.token).Int(); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + in.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d %s", code, body)
	}
	_, body := get("/metrics")
	for _, want := range []string{"lockproxy_locks_granted_total 1", "lockproxy_locks_released_total 1", "lockproxy_clients 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, n := range nodes {
		n.Kill()
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with every node down: %d", code)
	}
}
