package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockproxy/lockproxy/internal/netfault"
)

// slowDelay is the extra latency, each way, of a delayed node.
const slowDelay = 150 * time.Millisecond

// faultKinds are the faults, in the order -fault all runs them.
var faultKinds = []string{"kill", "pause", "restart-empty", "partition", "delay", "proxy-kill", "proxy-pause", "proxy-cut",
	"clock-forward", "clock-back", "clock-drift"}

// faultHelp says what each kind does, for -help and the README.
var faultHelp = map[string]string{
	"none":          "no fault: a baseline",
	"kill":          "SIGKILL a node, restart it with its data after the fault's length",
	"pause":         "SIGSTOP a node, SIGCONT it after the fault's length",
	"restart-empty": "SIGKILL a node, delete its data, restart it at once (unsafe by the README's rules)",
	"partition":     "blackhole every link to a node; held bytes arrive when it ends",
	"delay":         "delay every link to a node by 150 ms each way",
	"proxy-kill":    "SIGKILL a lockproxy, restart it on its port after the fault's length",
	"proxy-pause":   "SIGSTOP a lockproxy, SIGCONT it after the fault's length",
	"proxy-cut":     "blackhole a lockproxy's links to a majority of the nodes (ZooKeeper: to all)",
	"clock-forward": "kill another node, then step a node's wall clock forward by 2x, 10x, 100x the lease's drift allowance in turn (clock.go)",
	"clock-back":    "as clock-forward, stepping the clock back",
	"clock-drift":   "run a node's wall clock 0.5% fast, within the drift allowance: no instance may see a jump",
}

// bed is what the faults act on.
type bed struct {
	up        *upstream
	instances []*instance
	rng       *rand.Rand // used by the injector goroutine only
	// driftAllowance is the clients' lease drift allowance, and steps the
	// clock steps made so far (clock.go).
	driftAllowance time.Duration
	steps          int
	length         time.Duration
}

// inject applies fault kind to a random target and returns what undoes it.
func (b *bed) inject(kind string) (heal func() error, what string, err error) {
	n := b.rng.IntN(len(b.up.nodes))
	node := b.up.nodes[n]
	in := b.instances[b.rng.IntN(len(b.instances))]
	nothing := func() error { return nil }
	nodeName := fmt.Sprintf("node %d", n+1)
	switch kind {
	case "none":
		return nothing, "nothing", nil
	case "kill":
		return node.Restart, "killed " + nodeName, node.Kill()
	case "pause":
		return node.Resume, "paused " + nodeName, node.Pause()
	case "restart-empty":
		err := errors.Join(node.Kill(), b.up.wipe(node), node.Restart())
		return nothing, "restarted " + nodeName + " empty", err
	case "partition":
		return b.blackhole(b.up.nodeLinks(n)), "partitioned " + nodeName, nil
	case "delay":
		return b.delay(n), "delayed " + nodeName, nil
	case "proxy-kill":
		return in.Restart, "killed lockproxy " + in.Addr(), in.Kill()
	case "proxy-pause":
		return in.Resume, "paused lockproxy " + in.Addr(), in.Pause()
	case "proxy-cut":
		return b.cut(in), "cut lockproxy " + in.Addr() + " off", nil
	case "clock-forward", "clock-back", "clock-drift":
		return b.clockFault(kind, n, b.length)
	}
	return nil, "", fmt.Errorf("unknown fault %q", kind)
}

func (b *bed) delay(n int) func() error {
	links := b.up.nodeLinks(n)
	for _, l := range links {
		l.SetDelay(slowDelay)
	}
	return func() error {
		for _, l := range links {
			l.SetDelay(0)
		}
		return nil
	}
}

// cut blackholes in's links to a majority of the nodes, chosen at random;
// to all of them for ZooKeeper, whose client needs only one server.
func (b *bed) cut(in *instance) func() error {
	i := 0
	for i < len(b.instances) && b.instances[i] != in {
		i++
	}
	row := b.up.links[i]
	n := len(row)/2 + 1
	if b.up.backend == "zookeeper" {
		n = len(row)
	}
	var ls []*netfault.Proxy
	for _, k := range b.rng.Perm(len(row))[:n] {
		ls = append(ls, row[k])
	}
	return b.blackhole(ls)
}

func (b *bed) blackhole(ls []*netfault.Proxy) func() error {
	for _, l := range ls {
		l.SetBlackhole(true)
	}
	return func() error {
		for _, l := range ls {
			l.SetBlackhole(false)
		}
		return nil
	}
}

// injector applies a fault of kind every interval, for length, until ctx
// ends; it heals the last one before it returns. It returns how many it
// applied.
func (b *bed) injector(ctx context.Context, kind string, interval, length time.Duration, logf func(string, ...any)) (int, error) {
	var applied int
	var errs []error
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return applied, errors.Join(errs...)
		case <-t.C:
		}
		heal, what, err := b.inject(kind)
		applied++
		logf("%s", what)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(length):
		}
		if err := heal(); err != nil {
			errs = append(errs, fmt.Errorf("heal after %s: %w", what, err))
		}
		if len(errs) > 3 {
			return applied, errors.Join(errs...)
		}
	}
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2)) }
