package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestSuiteZooKeeperRetries runs the suite on a three-server ZooKeeper
// ensemble for a few seconds, killing and restarting a lockproxy instance
// every second and a half, with the retrying clients (zkretry.go) taking
// their locks again through the other instance and changing modes. It
// asserts that locks were granted, faults applied and nothing violated.
func TestSuiteZooKeeperRetries(t *testing.T) {
	cfg := config{
		backend: "zookeeper", faults: []string{"proxy-kill"}, nodes: 3, instances: 2, clients: 8, keys: 2,
		duration: 8 * time.Second, interval: 1500 * time.Millisecond, length: 500 * time.Millisecond, ttl: 2 * time.Second,
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // the build and the ensemble may be slow
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
		t.Errorf("%d violations under lockproxy kills: %v", n, r.verdict.Examples)
	}
}
