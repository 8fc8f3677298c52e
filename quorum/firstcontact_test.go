package quorum

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// TestDurableHeldOutSaysWhy: a node verified durable that is held out
// because its counter went back does not blame fsync in its not-counted
// error: the operator would turn on what is already on.
func TestDurableHeldOutSaysWhy(t *testing.T) {
	nodes := oldNodes(3)
	for _, f := range nodes {
		f.durable, f.floor = true, 1000
	}
	r := New(asNodes(nodes), Config{MaxLease: time.Hour, StatusEvery: 10 * time.Millisecond})
	defer r.Close()
	eventually(t, 10*time.Second, "the counters read", func() bool {
		r.trust.mu.RLock()
		defer r.trust.mu.RUnlock()
		return r.trust.nodes[0].top == 1000
	})
	nodes[0].restartEmpty("run0-b") // durable, its counter gone: its data was lost
	var held HeldOut
	eventually(t, 10*time.Second, "node 0 held out", func() bool {
		for _, h := range r.HeldOut() {
			if h.Node == 0 {
				held = h
				return true
			}
		}
		return false
	})
	msg := (&NotCountedError{held}).Error()
	if !strings.Contains(msg, "its data was lost") || strings.Contains(msg, "without verified fsync") {
		t.Fatalf("node 0's not-counted error: %q, want the lost counter named, not fsync", msg)
	}
}
