package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/proctest"
)

// config is one invocation's settings.
type config struct {
	backend   string
	faults    []string
	nodes     int
	instances int
	clients   int
	keys      int
	duration  time.Duration // of each run
	interval  time.Duration // between faults
	length    time.Duration // of each fault
	ttl       time.Duration
	verbose   bool
	keep      bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultsuite:", err)
		os.Exit(2)
	}
	redis.SetLogger(quietLog{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := runAll(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultsuite:", err)
		os.Exit(2)
	}
	for _, r := range results {
		if r.verdict.violations() > 0 {
			os.Exit(1)
		}
	}
}

// quietLog drops go-redis's own log lines (a failed dial while an instance
// is down or starting): the table counts those errors.
type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("faultsuite", flag.ContinueOnError)
	fs.StringVar(&c.backend, "backend", "redlock", "redlock or zookeeper")
	fault := fs.String("fault", "all", "fault kind, a comma-separated list, or all: "+strings.Join(append([]string{"none"}, faultKinds...), ", "))
	fs.IntVar(&c.nodes, "nodes", 3, "redlock: redis-servers (3 or 5); zookeeper always runs 3 servers")
	fs.IntVar(&c.instances, "instances", 2, "lockproxy instances (at least 2)")
	fs.IntVar(&c.clients, "clients", 8, "clients, half native (LOCK/RENEW/UNLOCK), half legacy (SET NX PX and a compare-and-delete)")
	fs.IntVar(&c.keys, "keys", 3, "keys the clients contend for")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "length of each run")
	fs.DurationVar(&c.interval, "interval", 5*time.Second, "time from one fault to the next")
	fs.DurationVar(&c.length, "length", 2*time.Second, "how long each fault lasts (a kill: until the restart)")
	fs.DurationVar(&c.ttl, "ttl", 3*time.Second, "the clients' lock TTL")
	fs.BoolVar(&c.verbose, "v", false, "log each fault and a sample of each error kind to stderr")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (server data and logs)")
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.faults = strings.Split(*fault, ",")
	if *fault == "all" {
		c.faults = faultKinds
	}
	return c, c.validate()
}

func usage(fs *flag.FlagSet) {
	fmt.Fprintln(fs.Output(), "Usage: go run ./bench/faultsuite [flags]\n\nRuns lockproxy under faults and checks mutual exclusion and fencing. Faults:")
	for _, k := range append([]string{"none"}, faultKinds...) {
		fmt.Fprintf(fs.Output(), "  %-14s %s\n", k, faultHelp[k])
	}
	fs.PrintDefaults()
}

func (c config) validate() error {
	for _, f := range c.faults {
		if _, ok := faultHelp[f]; !ok {
			return fmt.Errorf("unknown fault %q", f)
		}
	}
	switch {
	case c.backend != "redlock" && c.backend != "zookeeper":
		return fmt.Errorf("unknown backend %q", c.backend)
	case c.nodes < 1 || c.nodes > 9:
		return fmt.Errorf("-nodes %d: want 1 to 9", c.nodes)
	case c.instances < 1 || c.instances > 9:
		return fmt.Errorf("-instances %d: want 1 to 9", c.instances)
	case c.clients < 1 || c.clients > 200 || c.keys < 1 || c.keys > 1000:
		return errors.New("-clients wants 1 to 200, -keys 1 to 1000")
	case c.duration <= 0 || c.duration > time.Hour || c.interval <= 0 || c.length < 0 || c.ttl < 100*time.Millisecond:
		return errors.New("-duration wants (0, 1h], -interval > 0, -length >= 0, -ttl >= 100ms")
	}
	return nil
}

// result is one run's row.
type result struct {
	backend, fault string
	duration       time.Duration
	faults         int
	ops, grants    int64
	errs           [numErrKinds]int64
	verdict        verdict
	longestGap     time.Duration
}

// runAll builds lockproxy, runs each fault kind in turn, and prints the
// table.
func runAll(ctx context.Context, cfg config, w io.Writer) (results []result, err error) {
	dir, err := os.MkdirTemp("", "faultsuite-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if cfg.keep {
			fmt.Fprintln(os.Stderr, "faultsuite: kept", dir)
			return
		}
		err = errors.Join(err, os.RemoveAll(dir))
	}()
	bin, err := proctest.BuildLockproxy(ctx, dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "faultsuite: %s, %d instances, %d clients on %d keys, ttl %v, a fault every %v lasting %v\n",
		upstreamDesc(cfg), cfg.instances, cfg.clients, cfg.keys, cfg.ttl, cfg.interval, cfg.length)
	writeHeader(w)
	for i, f := range cfg.faults {
		if ctx.Err() != nil {
			break
		}
		r, err := runOne(ctx, cfg, f, bin, filepath.Join(dir, fmt.Sprintf("run%d-%s", i+1, f)))
		if err != nil {
			return results, fmt.Errorf("%s: %w", f, err)
		}
		writeRow(w, r)
		results = append(results, r)
	}
	return results, nil
}

// maxLease is the instances' redlock.max_lease_ms: the longest lease the
// clients take (their TTL, or a connection-bound lock's default 10 s
// lease). Nodes that start without persistence are young for that long, so
// a restart-empty run first waits as long for its first grant.
func maxLease(cfg config) time.Duration {
	return max(cfg.ttl, 10*time.Second)
}

func upstreamDesc(cfg config) string {
	if cfg.backend == "zookeeper" {
		return "zookeeper: 3 servers"
	}
	return fmt.Sprintf("redlock: %d redis-servers (appendfsync always; for restart-empty none), max lease %v", cfg.nodes, maxLease(cfg))
}

// runOne sets up the servers, instances and clients, runs fault kind for
// cfg.duration, tears everything down and checks the history.
func runOne(ctx context.Context, cfg config, kind, bin, dir string) (r result, err error) {
	// restart-empty runs nodes without persistence: lockproxy cannot verify
	// fsync on them, so its restart rule decides when a restarted node
	// counts again.
	durable := kind != "restart-empty"
	up, err := startUpstream(cfg.backend, cfg.nodes, cfg.instances, durable, clockKind(kind), dir)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, up.close()) }()
	b := &bed{up: up, rng: newRand(), length: cfg.length,
		driftAllowance: time.Duration(float64(cfg.ttl)*0.01) + 2*time.Millisecond} // redlock.drift_factor and drift_fixed_ms defaults
	defer func() { err = errors.Join(err, b.stopInstances()) }()
	for i := range cfg.instances {
		in, err := startInstance(bin, cfg.backend, up.addrs(i), maxLease(cfg), dir, i)
		if err != nil {
			return r, err
		}
		b.instances = append(b.instances, in)
	}
	if err := b.awaitGrant(ctx, maxLease(cfg)); err != nil {
		return r, err
	}
	h, s := newHistory(), &stats{samples: map[int][]string{}}
	start := time.Now()
	applied, err := b.drive(ctx, cfg, kind, h, s)
	end := time.Now()
	if clockKind(kind) && err == nil {
		var line string
		line, err = b.checkClocks(ctx, kind, applied)
		fmt.Fprintf(os.Stderr, "faultsuite: %s: %s\n", kind, line)
	}
	grants, writes := h.snapshot()
	// The gap is measured while clients start new cycles: not over the
	// final heal and the last cycles' end.
	r = result{backend: cfg.backend, fault: kind, duration: end.Sub(start).Round(time.Second), faults: applied,
		ops: s.ops.Load(), grants: s.grants.Load(), verdict: check(grants, writes),
		longestGap: longestGap(grants, start, minTime(end, start.Add(cfg.duration)))}
	for k := range r.errs {
		r.errs[k] = s.errs[k].Load()
	}
	report(cfg, r, s)
	return r, err
}

// drive runs the clients and the injector for cfg.duration.
func (b *bed) drive(ctx context.Context, cfg config, kind string, h *history, s *stats) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var addrs []string
	for _, in := range b.instances {
		addrs = append(addrs, in.Addr())
	}
	prefix := "fs:" + newToken()[:8] + ":"
	var keys []string
	for i := range cfg.keys {
		keys = append(keys, fmt.Sprintf("%sk%d", prefix, i))
	}
	var wg sync.WaitGroup
	for i := range cfg.clients {
		c := newClient(i%2 == 1, keys, addrs, cfg.ttl, h, s, uint64(i)+uint64(time.Now().UnixNano()))
		c.retries = cfg.backend == "zookeeper" && i%4 == 0 // half the native clients (zkretry.go)
		wg.Go(func() {
			defer c.close()
			c.run(ctx)
		})
	}
	logf := func(format string, args ...any) {
		if cfg.verbose {
			fmt.Fprintf(os.Stderr, "%s faultsuite: %s: "+format+"\n", append([]any{time.Now().Format("15:04:05.000"), kind}, args...)...)
		}
	}
	applied, err := b.injector(ctx, kind, cfg.interval, cfg.length, logf)
	wg.Wait()
	return applied, err
}

func (b *bed) stopInstances() error {
	var errs []error
	for _, in := range b.instances {
		errs = append(errs, in.Stop())
	}
	return errors.Join(errs...)
}

// longestGap is the longest time in [start, end] without a live grant
// arriving, on any key.
func longestGap(grants []grant, start, end time.Time) time.Duration {
	times := []time.Time{start, end}
	for _, g := range grants {
		if g.live() && g.Recv.Before(end) {
			times = append(times, g.Recv)
		}
	}
	slices.SortFunc(times, time.Time.Compare)
	var gap time.Duration
	for i := 1; i < len(times); i++ {
		gap = max(gap, times[i].Sub(times[i-1]))
	}
	return gap
}

// report prints a run's violations, and with -v its error samples, to
// stderr.
func report(cfg config, r result, s *stats) {
	for _, e := range r.verdict.Examples {
		fmt.Fprintf(os.Stderr, "faultsuite: %s: VIOLATION %s\n", r.fault, e)
	}
	if cfg.backend == "zookeeper" {
		reportRetries(os.Stderr, r.fault, s)
	}
	if !cfg.verbose {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, samples := range s.samples {
		for _, m := range samples {
			fmt.Fprintf(os.Stderr, "faultsuite: %s: %s error: %s\n", r.fault, errKindNames[k], m)
		}
	}
}

const rowFormat = "%-9s %-13s %-5s %-6s %-7s %-6s %-8s %-7s %-8s %-5s %-5s %-7s %-5s %-10s %-7s %s\n"

func writeHeader(w io.Writer) {
	fmt.Fprintf(w, rowFormat, "backend", "fault", "dur", "faults", "ops", "grants", "noquorum", "timeout", "locklost", "conn", "other",
		"double", "stale", "fence-back", "refused", "longest-no-grant")
}

func writeRow(w io.Writer, r result) {
	v := r.verdict
	fmt.Fprintf(w, rowFormat, r.backend, r.fault, r.duration, fmt.Sprint(r.faults), fmt.Sprint(r.ops), fmt.Sprint(r.grants),
		fmt.Sprint(r.errs[errNoQuorum]), fmt.Sprint(r.errs[errTimeout]), fmt.Sprint(r.errs[errLockLost]),
		fmt.Sprint(r.errs[errConn]), fmt.Sprint(r.errs[errOther]), fmt.Sprint(v.DoubleGrants), fmt.Sprint(v.StaleWrites),
		fmt.Sprint(v.FenceRegressed), fmt.Sprint(v.RefusedWrites), r.longestGap.Round(time.Millisecond))
}
