package upstream

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestFreshNodesRestartedDurableCounted: the -NOQUORUM reply's advice on
// three fresh redis-servers without fsync, followed by restarting them with
// appendonly yes and appendfsync always while lockproxy runs. The instance
// held them out only because it first saw them young: their durable
// restarts are first contact again, counted at once, as for an instance
// started after them (held out for max_lease_ms, an hour here, before).
func TestFreshNodesRestartedDurableCounted(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	r := restartRedlock(t, servers, time.Hour)
	waitCounted(t, r, 30*time.Second, false, false, false)
	for _, s := range servers {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.RestartWith(redistest.Options{AppendFsyncAlways: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitCounted(t, r, 30*time.Second, true, true, true)
	if _, err := r.Acquire(t.Context(), "k", hold("a", time.Second)); err != nil {
		t.Fatalf("acquire after the durable restarts: %v", err)
	}
}
