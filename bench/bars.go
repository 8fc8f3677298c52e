package main

import (
	"fmt"
	"io"
	"time"
)

// The bars of issue 16, each a ratio of figures measured in the same run.
const (
	barOfRedis        = 0.5              // c=32 cycles/s at least this times one plain Redis's
	barOfRedsync      = 3.0              // c=32 cycles/s at least this times redsync's
	barCPUOfRedis     = 2.0              // c=32 server CPU per cycle at most this times plain Redis's
	barWait           = time.Millisecond // contended median wait at most this
	barFairness       = 1.0              // every contended client within this percent of the mean grants
	barZKOfRecipe1    = 1.0              // zookeeper backend c=1 cycles/s at least this times the recipe's
	barZKOfRecipe32   = 2.0              // and at c=32
	barDegraded       = faultBar         // a faulty node's case at least this times the healthy one
	barIdleConnsBytes = 100 << 20        // RSS with rssIdleConns idle connections below this
	barHeldLocksBytes = 200 << 20        // RSS with rssHeldLocks held locks below this
	barConcHigh       = 32               // the concurrency of the throughput and CPU bars
	barConcLow        = 1                // the concurrency of the latency and CPU bars
)

// figures are what a run measured, as the bars read them.
type figures struct {
	uncontended map[string][]outcome        // by backend
	contended   map[string][]contendOutcome // by backend
	faults      []faultRow
	rss         *rssFigures // nil: not measured
	inprocess   bool        // lockproxy's CPU is in the bench's, not measured apart
}

// bar is one bar's verdict with its figures.
type bar struct {
	what     string
	figures  string // the two figures, or why it was not measured
	measured bool
	met      bool
}

func (b bar) String() string {
	if !b.measured {
		return fmt.Sprintf("bar %s: not measured (%s)", b.what, b.figures)
	}
	return fmt.Sprintf("bar %s: %s: %s", b.what, b.figures, verdict(b.met))
}

// writeBars prints one line per bar.
func writeBars(w io.Writer, f figures) {
	fmt.Fprintln(w, "bars (issue 16; each a ratio of this run's figures):")
	for _, b := range bars(f) {
		fmt.Fprintln(w, b)
	}
}

// bars evaluates every bar over f, in the order.
func bars(f figures) []bar {
	out := []bar{
		rateBar(f, "redlock", "redis", barConcHigh, barOfRedis),
		rateBar(f, "redlock", "redsync", barConcHigh, barOfRedsync),
		cpuBar(f, "redis", barConcHigh, barCPUOfRedis),
		cpuBar(f, "redsync", barConcLow, 1),
		acquireBar(f),
		waitBar(f),
		fairnessBar(f),
		rateBar(f, "zookeeper", "zkrecipe", barConcLow, barZKOfRecipe1),
		rateBar(f, "zookeeper", "zkrecipe", barConcHigh, barZKOfRecipe32),
	}
	out = append(out, degradedBars(f.faults)...)
	return append(out, rssBars(f.rss)...)
}

func missing(what, why string) bar { return bar{what: what, figures: why} }

// rateBar: lockproxy's cycles/s on backend at conc at least k times ref's.
func rateBar(f figures, backend, ref string, conc int, k float64) bar {
	what := fmt.Sprintf("%s c=%d cycles/s lockproxy >= %gx %s", backend, conc, k, ref)
	lp, ok1 := find(f.uncontended[backend], "lockproxy", conc)
	re, ok2 := find(f.uncontended[backend], ref, conc)
	if !ok1 || !ok2 || re.rate() <= 0 {
		return missing(what, "both sides not in this run")
	}
	r := lp.rate() / re.rate()
	return bar{what: what, measured: true, met: r >= k,
		figures: fmt.Sprintf("%.0f against %.0f, %.2fx", lp.rate(), re.rate(), r)}
}

// cpuBar: the server CPU per cycle of lockproxy and its nodes at conc at
// most k times that of ref's servers.
func cpuBar(f figures, ref string, conc int, k float64) bar {
	what := fmt.Sprintf("redlock c=%d server CPU per cycle lockproxy+nodes <= %gx %s's", conc, k, ref)
	if f.inprocess {
		return missing(what, "lockproxy runs in the bench's process (-inprocess)")
	}
	lp, ok1 := find(f.uncontended["redlock"], "lockproxy", conc)
	re, ok2 := find(f.uncontended["redlock"], ref, conc)
	if !ok1 || !ok2 || lp.cycles == 0 || re.cycles == 0 {
		return missing(what, "both sides not in this run")
	}
	a, b := perCycle(lp.cost.server(), lp.cycles), perCycle(re.cost.server(), re.cycles)
	return bar{what: what, measured: true, met: a <= k*b,
		figures: fmt.Sprintf("%s (%s lockproxy + %s nodes) against %s", fmtMicros(a),
			fmtMicros(perCycle(lp.cost.proxy, lp.cycles)), fmtMicros(perCycle(lp.cost.upstream, lp.cycles)), fmtMicros(b))}
}

func perCycle(d time.Duration, n int64) float64 { return float64(d) / float64(max(n, 1)) }

func fmtMicros(ns float64) string { return fmt.Sprintf("%.0fµs", ns/1e3) }

// acquireBar: lockproxy's c=1 acquire p50 at most redsync's.
func acquireBar(f figures) bar {
	what := fmt.Sprintf("redlock c=%d acquire p50 lockproxy <= redsync's", barConcLow)
	lp, ok1 := find(f.uncontended["redlock"], "lockproxy", barConcLow)
	rs, ok2 := find(f.uncontended["redlock"], "redsync", barConcLow)
	if !ok1 || !ok2 || len(lp.acq) == 0 || len(rs.acq) == 0 {
		return missing(what, "both sides not in this run")
	}
	a, b := percentile(lp.acq, 0.5), percentile(rs.acq, 0.5)
	return bar{what: what, measured: true, met: a <= b,
		figures: fmt.Sprintf("%v against %v", a.Round(time.Microsecond), b.Round(time.Microsecond))}
}

// waitBar: lockproxy's contended median wait (redlock) at most barWait.
func waitBar(f figures) bar {
	what := fmt.Sprintf("redlock contended wait p50 lockproxy <= %v", barWait)
	lp, ok := findContended(f.contended["redlock"], "lockproxy")
	if !ok || len(lp.wait) == 0 {
		return missing(what, "not in this run")
	}
	p50 := percentile(lp.wait, 0.5)
	return bar{what: what, measured: true, met: p50 <= barWait,
		figures: fmt.Sprintf("%v against %v", p50.Round(time.Microsecond), barWait)}
}

// fairnessBar: every contended client within barFairness percent of the
// mean number of grants (redlock).
func fairnessBar(f figures) bar {
	what := fmt.Sprintf("redlock contended fairness: every client within %g%% of the mean grants", barFairness)
	lp, ok := findContended(f.contended["redlock"], "lockproxy")
	if !ok || lp.grants() == 0 {
		return missing(what, "not in this run")
	}
	fewest, most, dev := fairness(lp.perClient)
	return bar{what: what, measured: true, met: dev <= barFairness,
		figures: fmt.Sprintf("worst deviation %.2f%% (fewest %d, most %d) against %g%%", dev, fewest, most, barFairness)}
}

// degradedBars: each faulty case at least barDegraded of the healthy one.
func degradedBars(rows []faultRow) []bar {
	if len(rows) == 0 {
		return []bar{missing(fmt.Sprintf("degraded node >= %gx healthy", barDegraded), "not in this run")}
	}
	healthy := map[string]faultRow{}
	for _, r := range rows {
		if r.fault == healthyFault {
			healthy[r.what] = r
		}
	}
	var out []bar
	for _, r := range rows {
		if r.fault == healthyFault {
			continue
		}
		what := fmt.Sprintf("degraded %s %s ops/s >= %gx healthy", r.fault, r.what, barDegraded)
		h, ok := healthy[r.what]
		if !ok || h.rate == 0 {
			out = append(out, missing(what, "no healthy case"))
			continue
		}
		share := r.rate / h.rate
		out = append(out, bar{what: what, measured: true, met: share >= barDegraded,
			figures: fmt.Sprintf("%.0f against %.0f, %.2fx", r.rate, h.rate, share)})
	}
	return out
}

// rssBars: lockproxy's RSS with the idle connections and the held locks.
func rssBars(r *rssFigures) []bar {
	idle := fmt.Sprintf("RSS with %d idle connections < %d MB", rssIdleConns, barIdleConnsBytes>>20)
	held := fmt.Sprintf("RSS with %d held locks < %d MB", rssHeldLocks, barHeldLocksBytes>>20)
	if r == nil {
		return []bar{missing(idle, "not in this run"), missing(held, "not in this run")}
	}
	return []bar{rssBar(idle, r.idleConns, r.idleConnsErr, barIdleConnsBytes), rssBar(held, r.heldLocks, r.heldLocksErr, barHeldLocksBytes)}
}

func rssBar(what string, rss int64, err error, limit int64) bar {
	if err != nil {
		return missing(what, err.Error())
	}
	return bar{what: what, measured: true, met: rss < limit,
		figures: fmt.Sprintf("%s against %d MB", fmtMB(rss), limit>>20)}
}

func fmtMB(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
