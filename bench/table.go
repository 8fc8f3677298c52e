package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// writeTable prints one row per case, in the order of concurrency then
// s.order() whatever order they ran in, then the throughput ratios and the
// errors.
func writeTable(w io.Writer, s suite, results []outcome, concs []int) {
	fmt.Fprintf(w, "%-10s %-5s %-9s %-10s %-10s %-10s %-10s %s\n", "impl", "conc", "cycles", "cycles/s",
		"acq p50", "acq p99", "cycle p50", "errors")
	for _, conc := range concs {
		for _, impl := range s.order() {
			if o, ok := find(results, impl, conc); ok {
				fmt.Fprintln(w, row(o))
			}
		}
	}
	for _, pair := range [][2]string{{"lockproxy", s.peer}, {s.hop, s.baseline}} {
		if line := ratioLine(results, concs, pair[0], pair[1]); line != "" {
			fmt.Fprintln(w, line)
		}
	}
	writeErrors(w, results)
}

func row(o outcome) string {
	return fmt.Sprintf("%-10s %-5d %-9d %-10.0f %-10s %-10s %-10s %d", o.impl, o.conc, o.cycles, o.rate(),
		fmtLatency(percentile(o.acq, 0.50)), fmtLatency(percentile(o.acq, 0.99)), fmtLatency(percentile(o.lat, 0.50)), o.errors)
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

// ratioLine compares impl's throughput with other's at each concurrency;
// "" when there is nothing to compare.
func ratioLine(results []outcome, concs []int, impl, other string) string {
	var parts []string
	for _, conc := range concs {
		a, ok1 := find(results, impl, conc)
		b, ok2 := find(results, other, conc)
		if ok1 && ok2 && b.rate() > 0 {
			parts = append(parts, fmt.Sprintf("at conc %d: %.2fx", conc, a.rate()/b.rate()))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "ratio " + impl + "/" + other + " " + strings.Join(parts, "  ")
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
// time of this process, of the proxy subprocess (lockproxy's, or
// twemproxy's) and of the upstream servers. With redis, the commands the
// redis-servers ran, counting those called inside Lua scripts, and their
// socket reads, about one per round trip unless pipelined; with ZooKeeper,
// the requests it received, one per round trip of a request (pings of the
// open sessions included).
func writeCosts(w io.Writer, s suite, results []outcome, concs []int, inprocess bool) {
	fmt.Fprintf(w, "\nper cycle  conc  %-10s %-10s %-14s %s\n", "server-cpu", "bench-cpu", proxyColumn(inprocess), s.costHead())
	for _, conc := range concs {
		for _, impl := range s.order() {
			if o, ok := find(results, impl, conc); ok {
				fmt.Fprintln(w, costRow(s, o, inprocess))
			}
		}
	}
}

func costRow(s suite, o outcome, inprocess bool) string {
	return fmt.Sprintf("%-10s %-5d %s", o.impl, o.conc, perUnit(s, o.cost, o.cycles, inprocess))
}

// perUnit is c divided by n (cycles or grants), as s's costs columns. With
// lockproxy in this process the server CPU is unknown: "-".
func perUnit(s suite, c costs, count int64, inprocess bool) string {
	n := float64(max(count, 1))
	cpu := func(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d.Microseconds())/n) }
	server := cpu(c.server())
	if inprocess {
		server = "-"
	}
	if s.backend == "zookeeper" {
		return fmt.Sprintf("%-10s %-10s %-14s %-10s %.1f", server, cpu(c.bench), cpu(c.proxy), cpu(c.upstream), float64(c.cmds)/n)
	}
	return fmt.Sprintf("%-10s %-10s %-14s %-10s %-11.1f %.1f", server, cpu(c.bench), cpu(c.proxy), cpu(c.upstream),
		float64(c.cmds)/n, float64(c.reads)/n)
}

// writeContendedCosts prints what one grant of the contended case cost, as
// writeCosts does for a cycle.
func writeContendedCosts(w io.Writer, s suite, results []contendOutcome, inprocess bool) {
	fmt.Fprintf(w, "\nper grant  %-10s %-10s %-14s %s\n", "server-cpu", "bench-cpu", proxyColumn(inprocess), s.costHead())
	for _, impl := range s.order() {
		if o, ok := findContended(results, impl); ok {
			fmt.Fprintf(w, "%-10s %s\n", o.impl, perUnit(s, o.cost, o.grants(), inprocess))
		}
	}
}

func proxyColumn(inprocess bool) string {
	if inprocess {
		return "(in bench)"
	}
	return "proxy-cpu"
}

// writeContended prints the contended case: one row per implementation,
// the waits of the grants that waited for another client's, the ratio of
// the median waits and the errors (the bars come at the end of the run). A grant's wait runs from asking to holding the lock; its gap from
// the previous holder hearing its release was done (or a later grantee
// asking, if that came after) to the grant; held from the grant to the
// release being done.
func writeContended(w io.Writer, s suite, results []contendOutcome, clients int, hold time.Duration) {
	fmt.Fprintf(w, "contended: %d clients, 1 key, hold %v; %s\n", clients, hold, s.contendedHow())
	fmt.Fprintf(w, "%-10s %-7s %-9s %-10s %-10s %-10s %-10s %-10s %-7s %-7s %-8s %-8s %s\n", "impl", "grants", "grants/s",
		"wait p50", "wait p99", "gap p50", "gap p99", "held p50", "fewest", "most", "max dev", "gave up", "errors")
	for _, impl := range s.order() {
		if o, ok := findContended(results, impl); ok {
			fmt.Fprintln(w, contendedRow(o))
		}
	}
	writeBehind(w, s, results)
	lp, okLP := findContended(results, "lockproxy")
	pe, okPE := findContended(results, s.peer)
	if okLP && okPE && len(lp.wait) > 0 && len(pe.wait) > 0 {
		line := fmt.Sprintf("ratio wait p50 %s/lockproxy: %sx%s", s.peer, fmtRatio(waitGain(lp, pe)), behindGain(lp, pe))
		if s.backend == "zookeeper" && pe.rate() > 0 {
			line += fmt.Sprintf("; grants/s lockproxy/%s: %.2fx", s.peer, lp.rate()/pe.rate())
		}
		fmt.Fprintln(w, line)
	}
	for _, o := range results {
		for _, line := range o.errs.lines() {
			fmt.Fprintf(w, "errors %s contended: %s\n", o.impl, line)
		}
	}
}

// writeBehind prints, for each implementation, the share and the waits of
// the grants that had to wait for another client's grant.
func writeBehind(w io.Writer, s suite, results []contendOutcome) {
	var parts []string
	for _, impl := range s.order() {
		if o, ok := findContended(results, impl); ok && o.grants() > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f%% of grants, wait p50 %s p99 %s", impl,
				100*float64(len(o.behind))/float64(o.grants()), fmtPercentile(o.behind, 0.50), fmtPercentile(o.behind, 0.99)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintln(w, "waited behind another client's grant: "+strings.Join(parts, "; "))
	}
}

func contendedRow(o contendOutcome) string {
	fewest, most, dev := fairness(o.perClient)
	return fmt.Sprintf("%-10s %-7d %-9.0f %-10s %-10s %-10s %-10s %-10s %-7d %-7d %-8s %-8d %d", o.impl, o.grants(), o.rate(),
		fmtPercentile(o.wait, 0.50), fmtPercentile(o.wait, 0.99), fmtPercentile(o.gap, 0.50), fmtPercentile(o.gap, 0.99),
		fmtPercentile(o.held, 0.50), fewest, most, fmt.Sprintf("%.1f%%", dev), o.gaveUp, o.errors)
}

// fmtPercentile is the p-th percentile of sorted rounded to the
// microsecond, "0s" included; "-" when there are no samples.
func fmtPercentile(sorted []time.Duration, p float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	return percentile(sorted, p).Round(time.Microsecond).String()
}

// waitGain is how many times longer the peer's median wait is than
// lockproxy's, over all grants.
func waitGain(lp, pe contendOutcome) float64 {
	return gain(percentile(lp.wait, 0.50), percentile(pe.wait, 0.50))
}

func gain(lpWait, rsWait time.Duration) float64 {
	if lpWait <= 0 {
		return math.Inf(1)
	}
	return float64(rsWait) / float64(lpWait)
}

// behindGain is the ratio of the median waits over the grants that waited
// behind another client's only, as a note; "" when either has none.
func behindGain(lp, rs contendOutcome) string {
	lpWait, rsWait := percentile(lp.behind, 0.50), percentile(rs.behind, 0.50)
	if lpWait <= 0 || rsWait <= 0 {
		return ""
	}
	return fmt.Sprintf(" (over the grants that waited behind another client's: %sx)", fmtRatio(float64(rsWait)/float64(lpWait)))
}

// fmtRatio shows a ratio below 10 with two decimals, others as integers.
func fmtRatio(r float64) string {
	if r < 10 {
		return fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("%.0f", r)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func findContended(results []contendOutcome, impl string) (contendOutcome, bool) {
	for _, o := range results {
		if o.impl == impl {
			return o, true
		}
	}
	return contendOutcome{}, false
}
