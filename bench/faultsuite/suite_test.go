package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestSuiteKill runs the suite for a few seconds, killing and restarting a
// node every second and a half: a fault lockproxy must survive safely
// (the nodes run with appendfsync always). It asserts that locks were
// granted, faults applied and nothing was violated; not how fast.
func TestSuiteKill(t *testing.T) {
	cfg := config{
		backend: "redlock", faults: []string{"kill"}, nodes: 3, instances: 2, clients: 6, keys: 2,
		duration: 6 * time.Second, interval: 1500 * time.Millisecond, length: 500 * time.Millisecond, ttl: 2 * time.Second,
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // the build may be slow
	defer cancel()
	results, err := runAll(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("got %d results, want 1", len(results))
	}
	r := results[0]
	t.Logf("%+v", r)
	if r.grants == 0 || r.faults == 0 {
		t.Errorf("%d grants under %d faults: want some of each", r.grants, r.faults)
	}
	if n := r.verdict.violations(); n > 0 {
		t.Errorf("%d violations under node kills: %v", n, r.verdict.Examples)
	}
}
