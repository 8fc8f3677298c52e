package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/lockproxy/lockproxy/internal/netfault"
)

// slowDelay is the extra latency of the delayed node, each way.
const slowDelay = 150 * time.Millisecond

// faultBar is the least share of the healthy figure a faulty case must keep.
const faultBar = 0.8

// healthyFault is the name of the condition the others are compared with.
const healthyFault = "healthy"

// fault is one condition of the third node: applied before its cases,
// cleared after.
type fault struct {
	name         string
	apply, clear func() error
}

// faultRow is one measured case under one condition.
type faultRow struct {
	fault string
	what  string // "conc N" or "contended N"
	rate  float64
	p50   time.Duration
	p99   time.Duration
	errs  int64
}

// runFaults measures lockproxy over three redis-servers, the third behind a
// delaying proxy, in one run: all healthy, the third paused (SIGSTOP), the
// third delayed by slowDelay; uncontended at each -concurrency and
// contended, and prints the table; the bars compare each faulty case with
// the healthy one.
func runFaults(ctx context.Context, o options, l *launcher, dir string, w io.Writer) (rows []faultRow, err error) {
	nodes, err := startCluster(filepath.Join(dir, "faults"), nodeCount)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, nodes.stop()) }()
	slow := nodes[nodeCount-1]
	link, err := netfault.Listen(slow.Addr())
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, link.Close()) }()
	addrs := nodes.addrs()
	addrs[nodeCount-1] = link.Addr()
	px, err := l.start(ctx, suites[0], addrs)
	if err != nil {
		return nil, err
	}
	t := newLockproxyTarget(px.addr, px.pid, max(2*max(o.contended, maxOf(o.conc)), 10))
	defer func() { err = errors.Join(err, closeTargets([]*target{t}, px)) }()
	fmt.Fprintf(w, "faults (redlock): %d x redis-server, the third behind a delaying TCP proxy; lockproxy %s; %s\n",
		nodeCount, proxyDesc(px), perCase(o))
	faults := []fault{
		{healthyFault, func() error { return nil }, func() error { return nil }},
		{"paused", slow.Pause, slow.Resume},
		{fmt.Sprintf("delayed %v", slowDelay), func() error { link.SetDelay(slowDelay); return nil }, func() error { link.SetDelay(0); return nil }},
	}
	for _, f := range faults {
		if ctx.Err() != nil {
			break
		}
		if err := f.apply(); err != nil {
			return rows, err
		}
		rows = append(rows, measureFault(ctx, o, t, f.name)...)
		if err := f.clear(); err != nil {
			return rows, err
		}
	}
	writeFaults(w, rows)
	return rows, nil
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// measureFault runs the uncontended and contended cases under one fault,
// each after a warm-up.
func measureFault(ctx context.Context, o options, t *target, name string) []faultRow {
	var rows []faultRow
	for _, conc := range o.conc {
		s := spec{conc: conc, duration: o.warmup, cycles: o.cycles, timeout: o.timeout, samples: o.samples, phase: "warmup-" + name}
		if o.warmup > 0 {
			measure(ctx, t, s)
		}
		s.duration, s.phase = o.duration, "run-"+name
		res := measure(ctx, t, s)
		logErrors(name, fmt.Sprint("conc ", conc), res.errors, res.errs)
		rows = append(rows, faultRow{name, fmt.Sprint("conc ", conc), res.rate(), percentile(res.lat, 0.50), percentile(res.lat, 0.99), res.errors})
	}
	if o.contended > 0 {
		s := contendSpec{clients: o.contended, hold: o.hold, duration: o.warmup, attempts: o.cycles, timeout: o.timeout, phase: "warmup-" + name}
		if o.warmup > 0 {
			measureContended(ctx, t, s)
		}
		s.duration, s.phase = o.duration, "run-"+name
		res := measureContended(ctx, t, s)
		logErrors(name, fmt.Sprint("contended ", o.contended), res.errors, res.errs)
		rows = append(rows, faultRow{name, fmt.Sprint("contended ", o.contended), res.rate(), percentile(res.wait, 0.50), percentile(res.wait, 0.99), res.errors})
	}
	return rows
}

func logErrors(fault, what string, n int64, errs errorLog) {
	if n > 0 {
		fmt.Fprintf(os.Stderr, "bench: faults %s %s: %d errors: %v\n", fault, what, n, errs.lines())
	}
}

// writeFaults prints the table.
func writeFaults(w io.Writer, rows []faultRow) {
	fmt.Fprintf(w, "%-16s %-14s %-10s %-10s %-10s %s\n", "node 3", "case", "ops/s", "p50", "p99", "errors")
	for _, r := range rows {
		fmt.Fprintf(w, "%-16s %-14s %-10.0f %-10s %-10s %d\n", r.fault, r.what, r.rate, fmtLatency(r.p50), fmtLatency(r.p99), r.errs)
	}
	fmt.Fprintln(w, "(ops/s: LOCK+UNLOCK cycles uncontended, grants contended; p50/p99: the cycle, or asked-to-granted when contended)")
}
