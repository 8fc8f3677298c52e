package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/clockshim"
)

// The clock faults (issue 30 §1). Redis nodes run under a wall-clock shim
// of our own (internal/clockshim, LD_PRELOAD: clock_gettime(CLOCK_REALTIME),
// gettimeofday and time); lockproxy's own clock cannot be stepped that way
// (Go does not read the time through libc).
//
//   - clock-forward and clock-back: another node is killed for the fault's
//     length, so that the locks taken meanwhile live on a bare majority
//     that includes the target; half-way through, the target's clock steps
//     forward (back) by 2×, 10× or 100× the clients' lease drift allowance
//     (ttl × 0.01 + 2 ms), in turn; then the killed node restarts (with
//     its data: appendfsync always). The clock is not stepped back after:
//     that would be a second jump.
// For ZooKeeper the same faults step the ZooKeeper servers' clocks (the
// JVM reads its wall clock through libc; ZooKeeper's sessions go by its
// monotonic clock), which lockproxy does not read.
//
//   - clock-drift: the target's clock runs 0.5% fast (half of
//     redlock.drift_factor) for the fault's length, in 10 ms steps: the
//     drift check. No instance may take that for a jump.
//
// After a clock run, each instance's INFO nodes says how many jumps it saw
// (clock_jumps); the run fails if a drift run saw any, or a step run saw
// fewer than one per step and instance.

// clockKinds are the faults that need the nodes under the shim.
func clockKind(kind string) bool { return strings.HasPrefix(kind, "clock-") }

// driftRate is how much faster than real time a drifting clock runs.
const driftRate = 0.005

// stepSizes are the clock steps, in turn, as multiples of the lease's
// drift allowance.
var stepSizes = []float64{2, 10, 100}

// startClocks builds the shim under dir and makes one clock per node: the
// environment each redis-server is started with.
func startClocks(n int, dir string) ([]*clockshim.Clock, error) {
	d := filepath.Join(dir, "clockshim")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	lib, err := clockshim.Build(d)
	if err != nil {
		return nil, err
	}
	clocks := make([]*clockshim.Clock, n)
	for i := range clocks {
		if clocks[i], err = clockshim.New(lib, d); err != nil {
			return nil, err
		}
	}
	return clocks, nil
}

// clockFault applies a clock fault of kind to node n and returns what
// undoes the rest of it.
func (b *bed) clockFault(kind string, n int, length time.Duration) (func() error, string, error) {
	if len(b.up.clocks) == 0 {
		return nil, "", fmt.Errorf("%s: the servers do not run under the clock shim", kind)
	}
	clock := b.up.clocks[n]
	name := fmt.Sprintf("node %d", n+1)
	if kind == "clock-drift" {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					_, _ = clock.Step(time.Duration(float64(10*time.Millisecond) * driftRate))
				}
			}
		}()
		return func() error { close(stop); <-done; return nil }, fmt.Sprintf("%s's clock runs %.1f%% fast", name, driftRate*100), nil
	}
	other := (n + 1 + b.rng.IntN(len(b.up.nodes)-1)) % len(b.up.nodes)
	victim := b.up.nodes[other]
	if err := victim.Kill(); err != nil {
		return nil, "", err
	}
	time.Sleep(length / 2) // locks are taken on the bare majority that includes node n
	step := time.Duration(stepSizes[b.steps%len(stepSizes)] * float64(b.driftAllowance))
	b.steps++
	if kind == "clock-back" {
		step = -step
	}
	_, err := clock.Step(step)
	what := fmt.Sprintf("killed node %d; stepped %s's clock %+.3fs", other+1, name, step.Seconds())
	return victim.Restart, what, err
}

// clockJumps reads how many clock jumps each instance saw (INFO nodes).
func (b *bed) clockJumps(ctx context.Context) ([]int, error) {
	var out []int
	for _, in := range b.instances {
		c := redis.NewClient(&redis.Options{Addr: in.Addr(), MaxRetries: -1})
		s, err := c.Info(ctx, "nodes").Result()
		c.Close()
		if err != nil {
			return out, err
		}
		n := -1
		for line := range strings.Lines(s) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "clock_jumps:"); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// checkClocks is the clock runs' check: a drift is never a jump, and every
// step is seen by every instance.
func (b *bed) checkClocks(ctx context.Context, kind string, applied int) (string, error) {
	if b.up.backend == "zookeeper" {
		return fmt.Sprintf("%d faults on the ZooKeeper servers' wall clocks (lockproxy reads none of them: its leases go by its own clock)", applied), nil
	}
	// The last step may have been made as the run ended: the instances
	// see it at their next reply from the node (a probe a second).
	var jumps []int
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		jumps, err = b.clockJumps(ctx)
		if err != nil {
			return "", err
		}
		if kind == "clock-drift" || slices.Min(jumps) >= applied || time.Now().After(deadline) {
			break
		}
	}
	line := fmt.Sprintf("clock jumps seen by the instances: %v, after %d faults", jumps, applied)
	for _, j := range jumps {
		switch {
		case kind == "clock-drift" && j != 0:
			return line, fmt.Errorf("a drift of %.1f%% (within the allowance) was taken for a jump: %s", driftRate*100, line)
		case kind != "clock-drift" && j < applied:
			return line, fmt.Errorf("fewer jumps seen than steps made: %s", line)
		}
	}
	return line, nil
}
