package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// embeddedSuite is lockproxy's embedded backend, the README's first
// command: bar 9's case only, it has no peer.
var embeddedSuite = suite{backend: "embedded"}

// embeddedResult is what bar 9's case measured: c=32 cycles on fresh keys
// on an empty embedded backend, then the same after keys distinct keys were
// locked once each and their leases ended.
type embeddedResult struct {
	keys  int
	desc  string // how lockproxy ran
	empty outcome
	fill  fillResult
	after outcome
}

// runEmbedded runs bar 9's case over a fresh lockproxy with the embedded
// backend and prints its table.
func runEmbedded(ctx context.Context, o options, l *launcher, w io.Writer) (e *embeddedResult, err error) {
	px, err := l.start(ctx, embeddedSuite, nil)
	if err != nil {
		return nil, err
	}
	t := newLockproxyTarget(px.addr, px.pid, 2*barConcHigh)
	defer func() { err = errors.Join(err, closeTargets([]*target{t}, px)) }()
	pr := &probe{upstream: func(context.Context, *costs) {}, closeFn: func() error { return nil }}
	e = &embeddedResult{keys: o.embKeys, desc: proxyDesc(px)}
	e.empty = runFresh(ctx, o, t, pr, "empty")
	e.fill = fill(ctx, px.addr, "bench:embedded:k", o.embKeys, stateLease, o.fillBound)
	fmt.Fprintf(os.Stderr, "bench: embedded fill: %v\n", e.fill)
	sleepUntil(ctx, time.Now().Add(stateLease)) // every lease has ended
	e.after = runFresh(ctx, o, t, pr, "after")
	writeEmbedded(w, o, e)
	return e, nil
}

// runFresh warms t up, then measures it at barConcHigh with every cycle on a
// key never locked before.
func runFresh(ctx context.Context, o options, t *target, pr *probe, name string) outcome {
	s := spec{conc: barConcHigh, duration: o.warmup, cycles: o.cycles, timeout: o.timeout, samples: o.samples,
		phase: "warmup-" + name, fresh: true}
	if o.warmup > 0 {
		if wu := measure(ctx, t, s); wu.errors > 0 {
			fmt.Fprintf(os.Stderr, "bench: embedded %s warm-up: %d errors: %v\n", name, wu.errors, wu.errs.lines())
		}
	}
	s.duration, s.phase = o.duration, "run-"+name
	before := pr.read(ctx, t.pid)
	res := measure(ctx, t, s)
	res.cost = pr.read(ctx, t.pid).sub(before)
	fmt.Fprintf(os.Stderr, "bench: embedded %s conc %d: %d cycles, %d errors in %v\n", name, barConcHigh, res.cycles, res.errors, res.elapsed.Round(1e6))
	return res
}

func writeEmbedded(w io.Writer, o options, e *embeddedResult) {
	fmt.Fprintf(w, "embedded (bar 9): lockproxy --backend embedded, %s; c=%d LOCK+UNLOCK, every cycle on a key never locked before, "+
		"on the empty backend, then after %d distinct keys were locked once each (SET key token NX PX %d, %d pipelines of %d) and their leases ended; %s\n",
		e.desc, barConcHigh, e.keys, stateLease.Milliseconds(), fillConns, fillBatch, perCase(o))
	fmt.Fprintf(w, "%-8s %-9s %-10s %-10s %-10s %-10s %s\n", "backend", "cycles", "cycles/s", "cycle p50", "cycle p99", "proxy-cpu", "errors")
	for _, r := range []struct {
		name string
		o    outcome
	}{{"empty", e.empty}, {"after", e.after}} {
		proxyCPU := fmtMicros(perCycle(r.o.cost.proxy, r.o.cycles))
		if o.inprocess || r.o.cycles == 0 {
			proxyCPU = "-"
		}
		fmt.Fprintf(w, "%-8s %-9d %-10.0f %-10s %-10s %-10s %d\n", r.name, r.o.cycles, r.o.rate(),
			fmtLatency(percentile(r.o.lat, 0.5)), fmtLatency(percentile(r.o.lat, 0.99)), proxyCPU, r.o.errors)
	}
	fmt.Fprintf(w, "fill: %v\n", e.fill)
	for name, r := range map[string]outcome{"empty": e.empty, "after": e.after} {
		for _, line := range r.errs.lines() {
			fmt.Fprintf(w, "errors embedded %s: %s\n", name, line)
		}
	}
}
