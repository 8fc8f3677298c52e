package quorum

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestFirstSeenYoungThenRestartedDurableCounted: the first-contact advice.
// Three fresh redis-servers without fsync are first seen young and held
// out (they may have restarted just before); the operator restarts them
// with appendonly yes and appendfsync always, as the -NOQUORUM reply says.
// The instance saw no restart of a process it counted or held out for a
// restart: the new processes are first contact again, and count at once,
// as they would for an instance started after them.
func TestFirstSeenYoungThenRestartedDurableCounted(t *testing.T) {
	nodes := newFakeNodes(3)
	for i, f := range nodes {
		f.run, f.uptime = fmt.Sprintf("run%d", i), time.Second
	}
	r := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond})
	defer r.Close()
	eventually(t, 10*time.Second, "the young nodes seen", func() bool {
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[0].runID != "" && r.trust.nodes[1].runID != "" && r.trust.nodes[2].runID != ""
	})
	if c := r.Counted(); slices.Contains(c, true) {
		t.Fatalf("young nodes without fsync counted at first sight: %v", c)
	}
	for i, f := range nodes {
		f.restartKeeping(fmt.Sprintf("run%d-b", i), true)
	}
	eventually(t, 10*time.Second, "the nodes restarted durable counted", func() bool {
		return slices.Equal(r.Counted(), []bool{true, true, true})
	})
	if _, err := r.Acquire(context.Background(), "k", hold("a")); err != nil {
		t.Fatalf("acquire after the durable restarts: %v", err)
	}
}
