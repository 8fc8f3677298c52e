package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// writeTable prints one row per case, in the order of concurrency then
// allImpls whatever order they ran in, then the throughput ratios and the
// errors.
func writeTable(w io.Writer, results []outcome, concs []int) {
	fmt.Fprintf(w, "%-10s %-5s %-9s %-10s %-10s %-10s %s\n", "impl", "conc", "cycles", "cycles/s", "p50", "p99", "errors")
	for _, conc := range concs {
		for _, impl := range allImpls {
			if o, ok := find(results, impl, conc); ok {
				fmt.Fprintln(w, row(o))
			}
		}
	}
	if line := ratioLine(results, concs); line != "" {
		fmt.Fprintln(w, line)
	}
	writeErrors(w, results)
}

func row(o outcome) string {
	return fmt.Sprintf("%-10s %-5d %-9d %-10.0f %-10s %-10s %d", o.impl, o.conc, o.cycles, o.rate(),
		fmtLatency(percentile(o.lat, 0.50)), fmtLatency(percentile(o.lat, 0.99)), o.errors)
}

// fmtLatency rounds to the microsecond; "-" when there were no samples.
func fmtLatency(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Microsecond).String()
}

func find(results []outcome, impl string, conc int) (outcome, bool) {
	for _, o := range results {
		if o.impl == impl && o.conc == conc {
			return o, true
		}
	}
	return outcome{}, false
}

// ratioLine compares lockproxy's throughput with redsync's at each
// concurrency; "" when there is nothing to compare.
func ratioLine(results []outcome, concs []int) string {
	var parts []string
	for _, conc := range concs {
		lp, ok1 := find(results, "lockproxy", conc)
		rs, ok2 := find(results, "redsync", conc)
		if ok1 && ok2 && rs.rate() > 0 {
			parts = append(parts, fmt.Sprintf("at conc %d: %.2fx", conc, lp.rate()/rs.rate()))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "ratio lockproxy/redsync " + strings.Join(parts, "  ")
}

func writeErrors(w io.Writer, results []outcome) {
	for _, o := range results {
		for _, line := range o.errs.lines() {
			fmt.Fprintf(w, "errors %s conc %d: %s\n", o.impl, o.conc, line)
		}
	}
}

// writeCosts prints what one successful cycle cost each part of the system,
// averaged over the measured phase (failed cycles are in the totals too): CPU
// time of this process, of the lockproxy subprocess and of the redis-servers;
// the commands the redis-servers ran, counting those called inside Lua
// scripts; and their socket reads, about one per round trip unless pipelined.
func writeCosts(w io.Writer, results []outcome, concs []int, inprocess bool) {
	proxyCol := "lockproxy-cpu"
	if inprocess {
		proxyCol = "(in bench)"
	}
	fmt.Fprintf(w, "\nper cycle  conc  %-10s %-14s %-10s %-11s %s\n", "bench-cpu", proxyCol, "redis-cpu", "redis-cmds", "redis-reads")
	for _, conc := range concs {
		for _, impl := range allImpls {
			if o, ok := find(results, impl, conc); ok {
				fmt.Fprintln(w, costRow(o))
			}
		}
	}
}

func costRow(o outcome) string {
	n := float64(max(o.cycles, 1))
	cpu := func(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d.Microseconds())/n) }
	return fmt.Sprintf("%-10s %-5d %-10s %-14s %-10s %-11.1f %.1f", o.impl, o.conc, cpu(o.cost.bench), cpu(o.cost.proxy),
		cpu(o.cost.redis), float64(o.cost.cmds)/n, float64(o.cost.reads)/n)
}
