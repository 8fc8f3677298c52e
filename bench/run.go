package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
)

// nodeCount is the number of redis-servers, as in a typical Redlock.
const nodeCount = 3

// run starts the servers, measures every case, prints the table and stops
// everything it started.
func run(ctx context.Context, o options, w io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "lockproxy-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	nodes, err := startCluster(dir, nodeCount)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, nodes.stop()) }()
	targets, px, err := openTargets(ctx, o, dir, nodes.addrs())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeTargets(targets, px)) }()
	writeHeader(w, o, nodes.version(ctx), px)
	pr := newProbe(nodes.addrs(), px.subprocessPID())
	defer func() { err = errors.Join(err, pr.close()) }()
	return measureAll(ctx, o, targets, pr, w)
}

// openTargets opens the implementations o asks for; px is nil unless
// lockproxy is one of them.
func openTargets(ctx context.Context, o options, dir string, nodes []string) ([]*target, *proxy, error) {
	poolSize := max(2*slices.Max(append([]int{o.contended}, o.conc...)), 10)
	var targets []*target
	var px *proxy
	for _, impl := range o.impls {
		if impl == "redsync" {
			targets = append(targets, newRedsyncTarget(nodes, poolSize))
			continue
		}
		var err error
		if px, err = startProxy(ctx, o.inprocess, dir, nodes); err != nil {
			return nil, nil, errors.Join(err, closeTargets(targets, nil))
		}
		targets = append(targets, newLockproxyTarget(px.addr, poolSize))
	}
	return targets, px, nil
}

func closeTargets(targets []*target, px *proxy) error {
	var errs []error
	for _, t := range targets {
		errs = append(errs, t.close())
	}
	if px != nil {
		errs = append(errs, px.stop())
	}
	return errors.Join(errs...)
}

func writeHeader(w io.Writer, o options, redisVersion string, px *proxy) {
	fmt.Fprintf(w, "machine: NumCPU=%d GOMAXPROCS=%d %s %s/%s; load average at start: %s\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, loadAverage())
	where := "-"
	if px != nil {
		where = px.desc
	}
	fmt.Fprintf(w, "setup: %d x redis-server %s on loopback; lockproxy %s; per case: warm-up %v, then %v or %d cycles\n",
		nodeCount, redisVersion, where, o.warmup, o.duration, o.cycles)
}

// measureAll runs every case, alternating which implementation goes first
// from one case to the next, then prints the tables: the uncontended cases
// and their costs, then the contended case.
func measureAll(ctx context.Context, o options, targets []*target, pr *probe, w io.Writer) error {
	if o.cpuprofile != "" && !o.inprocess && slices.Contains(o.impls, "lockproxy") {
		fmt.Fprintln(os.Stderr, "bench: -cpuprofile without -inprocess profiles the load generator only, not lockproxy")
	}
	stopProfile, err := startProfile(o.cpuprofile)
	if err != nil {
		return err
	}
	results := measureUncontended(ctx, o, targets, pr)
	contended := measureContendedCase(ctx, o, targets, pr)
	stopProfile()
	writeResults(w, o, results, contended)
	return ctx.Err()
}

func measureUncontended(ctx context.Context, o options, targets []*target, pr *probe) []outcome {
	var results []outcome
	for i, conc := range o.conc {
		for _, t := range caseOrder(targets, i) {
			if ctx.Err() != nil {
				return results // interrupted: print what was measured
			}
			results = append(results, runCase(ctx, o, t, pr, conc))
		}
	}
	return results
}

// measureContendedCase runs the contended case, after the uncontended ones,
// continuing their alternation of which implementation goes first.
func measureContendedCase(ctx context.Context, o options, targets []*target, pr *probe) []contendOutcome {
	if o.contended == 0 {
		return nil
	}
	var results []contendOutcome
	for _, t := range caseOrder(targets, len(o.conc)) {
		if ctx.Err() != nil {
			break
		}
		results = append(results, runContended(ctx, o, t, pr))
	}
	return results
}

func writeResults(w io.Writer, o options, results []outcome, contended []contendOutcome) {
	if len(o.conc) > 0 {
		writeTable(w, results, o.conc)
		writeCosts(w, results, o.conc, o.inprocess)
		fmt.Fprintln(w)
	}
	if o.contended > 0 {
		writeContended(w, contended, o.contended, o.hold)
		writeContendedCosts(w, contended, o.inprocess)
	}
}

// caseOrder is targets, reversed at every other concurrency.
func caseOrder(targets []*target, i int) []*target {
	order := slices.Clone(targets)
	if i%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// runCase warms t up, then measures it; warm-up errors are reported too.
func runCase(ctx context.Context, o options, t *target, pr *probe, conc int) outcome {
	s := spec{conc: conc, duration: o.warmup, cycles: o.cycles, timeout: o.timeout, samples: o.samples, phase: "warmup"}
	if o.warmup > 0 {
		if wu := measure(ctx, t, s); wu.errors > 0 {
			fmt.Fprintf(os.Stderr, "bench: %s conc %d warm-up: %d errors: %v\n", t.name, conc, wu.errors, wu.errs.lines())
		}
	}
	s.duration, s.phase = o.duration, "run"
	before := pr.read(ctx)
	res := measure(ctx, t, s)
	res.cost = pr.read(ctx).sub(before)
	fmt.Fprintf(os.Stderr, "bench: %s conc %d: %d cycles, %d errors in %v\n", t.name, conc, res.cycles, res.errors, res.elapsed.Round(1e6))
	return res
}

// runContended warms the contended case of t up, then measures it.
func runContended(ctx context.Context, o options, t *target, pr *probe) contendOutcome {
	s := contendSpec{clients: o.contended, hold: o.hold, duration: o.warmup, attempts: o.cycles, timeout: o.timeout, phase: "warmup"}
	if o.warmup > 0 {
		if wu := measureContended(ctx, t, s); wu.errors > 0 {
			fmt.Fprintf(os.Stderr, "bench: %s contended warm-up: %d errors: %v\n", t.name, wu.errors, wu.errs.lines())
		}
	}
	s.duration, s.phase = o.duration, "run"
	before := pr.read(ctx)
	res := measureContended(ctx, t, s)
	res.cost = pr.read(ctx).sub(before)
	fmt.Fprintf(os.Stderr, "bench: %s contended %d: %d grants, %d gave up, %d errors in %v\n",
		t.name, o.contended, res.grants(), res.gaveUp, res.errors, res.elapsed.Round(1e6))
	return res
}

// startProfile starts a CPU profile of this process into file, if given.
func startProfile(file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// loadAverage is the 1, 5 and 15 minute load averages from /proc/loadavg,
// or "?": other work on the machine skews the numbers.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
