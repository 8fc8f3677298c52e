package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// nodeCount is the number of redis-servers, as in a typical Redlock.
const nodeCount = 3

// run measures each backend's suite in turn, printing its tables as it
// ends, and stops everything it started.
func run(ctx context.Context, o options, w io.Writer) (err error) {
	began := time.Now()
	dir, err := os.MkdirTemp("", "lockproxy-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.cpuprofile != "" && !o.inprocess && slices.Contains(o.impls, "lockproxy") {
		fmt.Fprintln(os.Stderr, "bench: -cpuprofile without -inprocess profiles the load generator only, not lockproxy")
	}
	stopProfile, err := startProfile(o.cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	writeMachine(w)
	l := &launcher{inprocess: o.inprocess, procs: o.procs, dir: dir}
	var rssNodes cluster // started now, so that they are old enough when the RSS cases run (runRSS)
	if o.rss && o.inprocess {
		fmt.Fprintln(w, "rss: not measured: it needs lockproxy as a subprocess (-inprocess)")
	} else if o.rss {
		if rssNodes, err = startCluster(filepath.Join(dir, "rss"), nodeCount); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, rssNodes.stop()) }()
	}
	f := figures{uncontended: map[string][]outcome{}, contended: map[string][]contendOutcome{}, inprocess: o.inprocess}
	for i, s := range o.suites {
		if ctx.Err() != nil || !o.hasCases() {
			break
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		if f.uncontended[s.backend], f.contended[s.backend], err = runSuite(ctx, o, s, l, filepath.Join(dir, s.backend), w); err != nil {
			return err
		}
	}
	if o.faults && ctx.Err() == nil {
		fmt.Fprintln(w)
		if f.faults, err = runFaults(ctx, o, l, dir, w); err != nil {
			return err
		}
	}
	if o.state && ctx.Err() == nil {
		fmt.Fprintln(w)
		if f.state, err = runNodeState(ctx, o, l, dir, w); err != nil {
			return err
		}
	}
	if o.embedded && ctx.Err() == nil {
		fmt.Fprintln(w)
		if f.embedded, err = runEmbedded(ctx, o, l, w); err != nil {
			return err
		}
	}
	if rssNodes != nil && ctx.Err() == nil {
		fmt.Fprintln(w)
		if f.rss, err = runRSS(ctx, l, rssNodes, w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	writeBars(w, f)
	fmt.Fprintf(w, "run took %v (lockproxy's build included)\n", time.Since(began).Round(time.Second))
	return ctx.Err()
}

// bed is one backend's servers and implementations, ready to measure.
type bed struct {
	targets []*target
	probe   *probe
	setup   string         // the section's header line
	closers []func() error // run last first
}

func (b *bed) close() error {
	var errs []error
	for _, c := range slices.Backward(b.closers) {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// runSuite starts s's servers and implementations in dir, measures every
// case, prints the tables and stops what it started; it returns what it
// measured.
func runSuite(ctx context.Context, o options, s suite, l *launcher, dir string, w io.Writer) (
	results []outcome, contended []contendOutcome, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	b := &bed{}
	defer func() { err = errors.Join(err, b.close()) }()
	open := openRedlock
	if s.backend == "zookeeper" {
		open = openZooKeeper
	}
	if err := open(ctx, o, s, l, dir, b); err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(w, b.setup)
	results = measureUncontended(ctx, o, b.targets, b.probe)
	contended = measureContendedCase(ctx, o, b.targets, b.probe)
	writeResults(w, o, s, results, contended)
	return results, contended, nil
}

// openRedlock starts the redis-servers in dir, then the implementations of
// s over them.
func openRedlock(ctx context.Context, o options, s suite, l *launcher, dir string, b *bed) error {
	nodes, err := startCluster(dir, nodeCount)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, nodes.stop)
	addrs := nodes.addrs()
	others := map[string]func(poolSize int) (*target, error){
		s.peer: func(poolSize int) (*target, error) { return newRedsyncTarget(addrs, poolSize), nil },
		// the first node doubles as the plain Redis: the others idle meanwhile
		s.baseline: func(poolSize int) (*target, error) { return newRedisTarget(addrs[0], poolSize), nil },
	}
	hop := "-"
	if o.runs(s, s.hop) {
		tw, why, err := startTwemproxy(ctx, o.twemproxy, dir, addrs[0])
		if err != nil {
			return err
		}
		hop = why
		if tw != nil {
			b.closers = append(b.closers, tw.stop)
			hop = tw.desc
			others[s.hop] = func(poolSize int) (*target, error) { return newTwemproxyTarget(tw, poolSize), nil }
		}
	}
	targets, px, err := openTargets(ctx, o, s, l, addrs, others)
	if err != nil {
		return err
	}
	b.targets = targets
	b.closers = append(b.closers, func() error { return closeTargets(targets, px) })
	b.probe = newRedisProbe(nodes)
	b.closers = append(b.closers, b.probe.close)
	b.setup = fmt.Sprintf("setup (redlock): %d x redis-server %s on loopback; lockproxy %s; twemproxy (the redis cycle through it, to the first node) %s; %s",
		nodeCount, nodes.version(ctx), proxyDesc(px), hop, perCase(o))
	return nil
}

// openTargets opens the implementations of s that o asks for, in the
// table's order: lockproxy, or one of others by name (one not in others is
// left out); px is nil unless lockproxy is one of them.
func openTargets(ctx context.Context, o options, s suite, l *launcher, servers []string,
	others map[string]func(poolSize int) (*target, error)) ([]*target, *proxy, error) {
	poolSize := max(2*slices.Max(append([]int{o.contended}, o.conc...)), 10)
	var targets []*target
	var px *proxy
	for _, impl := range s.order() {
		if !o.runs(s, impl) {
			continue
		}
		var t *target
		var err error
		if impl == "lockproxy" {
			if px, err = l.start(ctx, s, servers); err == nil {
				t = newLockproxyTarget(px.addr, px.pid, poolSize)
			}
		} else if open, ok := others[impl]; ok {
			t, err = open(poolSize)
		} else {
			continue
		}
		if err != nil {
			return nil, nil, errors.Join(err, closeTargets(targets, px))
		}
		targets = append(targets, t)
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

func writeMachine(w io.Writer) { fmt.Fprintln(w, machineLine()) }

// machineLine names the machine and its load now.
func machineLine() string {
	return fmt.Sprintf("machine: NumCPU=%d GOMAXPROCS=%d %s %s/%s; load average at start: %s",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, loadAverage())
}

// proxyDesc is how lockproxy runs, for the header; "-" when it does not.
func proxyDesc(px *proxy) string {
	if px == nil {
		return "-"
	}
	return px.desc
}

func perCase(o options) string {
	return fmt.Sprintf("per case: warm-up %v, then %v or %d cycles", o.warmup, o.duration, o.cycles)
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
		if t.contend == nil {
			continue // the plain Redis baseline has no way to wait
		}
		results = append(results, runContended(ctx, o, t, pr))
	}
	return results
}

// writeResults prints one backend's tables: the uncontended cases and their
// costs, then the contended case and its costs.
func writeResults(w io.Writer, o options, s suite, results []outcome, contended []contendOutcome) {
	if len(o.conc) > 0 {
		writeTable(w, s, results, o.conc)
		writeCosts(w, s, results, o.conc, o.inprocess)
		fmt.Fprintln(w)
	}
	if o.contended > 0 {
		writeContended(w, s, contended, o.contended, o.hold)
		writeContendedCosts(w, s, contended, o.inprocess)
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
	before := pr.read(ctx, t.pid)
	res := measure(ctx, t, s)
	res.cost = pr.read(ctx, t.pid).sub(before)
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
	before := pr.read(ctx, t.pid)
	res := measureContended(ctx, t, s)
	res.cost = pr.read(ctx, t.pid).sub(before)
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
