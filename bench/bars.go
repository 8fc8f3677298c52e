package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// The bars of issue 29, each lockproxy's figure against its peer's measured
// in the same run (redsync, twemproxy, go-zookeeper's recipe), or against a
// constant.
const (
	barOfRedsync      = 1.5       // 1: c=32 cycles/s at least this times redsync's
	barNodeCPU32      = 0.5       // 2: c=32 node CPU per cycle at most this times redsync's
	barNodeCPU1       = 1.0       // 2: and at c=1
	barCmdsPerCycle   = 18        // 3: Redis commands per uncontended cycle, all nodes, Lua calls included
	barCmdsPerGrant   = 27        // 3: and per contended grant
	barProxyCPU       = 2.0       // 4: proxy CPU per cycle at most this times twemproxy's, at c=32 and c=1
	barAcquire        = 1.2       // 5: c=1 acquire p50 at most this times redsync's
	barContended      = 1.5       // 6: contended grants/s at least this times redsync's
	barFairness       = 1.0       // 6: every contended client within this percent of the mean grants
	barDegraded       = faultBar  // 7: a faulty node's case at least this times the healthy one
	barEmbedded       = 0.8       // 9: c=32 cycles/s after the keys at least this times the empty backend's
	barZKOfRecipe1    = 1.2       // zookeeper c=1 cycles/s at least this times the recipe's
	barZKOfRecipe32   = 2.0       // and at c=32
	barZKContended    = 1.5       // zookeeper contended grants/s at least this times the recipe's
	barZKProxyCPU     = 2.0       // zookeeper proxy CPU per cycle at c=1 at most this times its c=32 figure
	barPTRate         = 1.0       // passthrough commands/s at least this times twemproxy's, at c=32 and c=1
	barPTCPU          = 1.3       // passthrough CPU per forwarded command at most this times twemproxy's
	barIdleConnsBytes = 100 << 20 // RSS with rssIdleConns idle connections below this
	barHeldLocksBytes = 200 << 20 // RSS with rssHeldLocks held locks below this
	barConcHigh       = 32        // the high concurrency of the bars
	barConcLow        = 1         // the low concurrency of the bars
)

// figures are what a run measured, as the bars read them.
type figures struct {
	uncontended map[string][]outcome        // by backend
	contended   map[string][]contendOutcome // by backend
	faults      []faultRow
	state       []stateRun      // bar 8's case, one per key count; nil: not run
	embedded    *embeddedResult // bar 9's case; nil: not run
	rss         *rssFigures     // nil: not measured
	inprocess   bool            // lockproxy's CPU is in the bench's, not measured apart
}

// bar is one bar's verdict with its figures.
type bar struct {
	id       string // the number of the bar: "1" to "9", "zk", "pt", "mem"
	what     string
	lp       string // lockproxy's figure
	peer     string // the peer's name and figure; "" when the limit is a constant
	ratio    string // lockproxy's figure over the peer's; "" when none
	limit    string // "<= 0.5x", ">= 1.5x", "<= 18", ...
	measured bool
	why      string // why it was not measured
	met      bool
}

// String is the bar's line: name, lockproxy's figure, the peer's, the
// ratio, the limit and the verdict.
func (b bar) String() string {
	if !b.measured {
		return fmt.Sprintf("bar %s %s: not measured (%s)", b.id, b.what, b.why)
	}
	parts := []string{"lockproxy " + b.lp}
	if b.peer != "" {
		parts = append(parts, b.peer)
	}
	if b.ratio != "" {
		parts = append(parts, "ratio "+b.ratio)
	}
	parts = append(parts, "limit "+b.limit)
	return fmt.Sprintf("bar %s %s: %s: %s", b.id, b.what, strings.Join(parts, ", "), verdict(b.met))
}

// writeBars prints one line per bar.
func writeBars(w io.Writer, f figures) {
	fmt.Fprintln(w, "bars (issue 29; lockproxy against its peer in this run, or a constant):")
	for _, b := range bars(f) {
		fmt.Fprintln(w, b)
	}
}

func missing(id, what, why string) bar { return bar{id: id, what: what, why: why} }

const notInRun = "both sides not in this run"

// ratioBar compares lockproxy's figure lp with the peer's pe: met when
// lp/pe >= k (atLeast) or <= k; unit formats both figures.
func ratioBar(id, what string, lp float64, peer string, pe float64, unit func(float64) string, k float64, atLeast bool) bar {
	if pe <= 0 {
		return missing(id, what, peer+"'s figure is 0")
	}
	r := lp / pe
	b := bar{id: id, what: what, lp: unit(lp), peer: peer + " " + unit(pe), ratio: fmt.Sprintf("%.2fx", r), measured: true}
	if atLeast {
		b.limit, b.met = fmt.Sprintf(">= %gx", k), r >= k
	} else {
		b.limit, b.met = fmt.Sprintf("<= %gx", k), r <= k
	}
	return b
}

// constBar compares lockproxy's figure lp with the constant limit k (at
// most), showing the peer's figure pe (peer "": none) beside it.
func constBar(id, what string, lp float64, peer string, pe float64, unit func(float64) string, k float64, limit string) bar {
	b := bar{id: id, what: what, lp: unit(lp), limit: limit, measured: true, met: lp <= k}
	if peer != "" {
		b.peer = peer + " " + unit(pe)
	}
	return b
}

func fmtRate(x float64) string     { return fmt.Sprintf("%.0f", x) }
func fmtMicros(ns float64) string  { return fmt.Sprintf("%.0fµs", ns/1e3) }
func fmtCount(x float64) string    { return fmt.Sprintf("%.1f", x) }
func fmtDuration(x float64) string { return time.Duration(x).Round(time.Microsecond).String() }
func fmtMB(b int64) string         { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

func perCycle(d time.Duration, n int64) float64 { return float64(d) / float64(max(n, 1)) }

// bars evaluates every bar over f, in the order.
func bars(f figures) []bar {
	rl, zk := f.uncontended["redlock"], f.uncontended["zookeeper"]
	out := []bar{
		rateBar("1", "redlock", rl, "redsync", barConcHigh, barOfRedsync),
		nodeCPUBar(rl, barConcHigh, barNodeCPU32),
		nodeCPUBar(rl, barConcLow, barNodeCPU1),
		cmdsBar(rl, barConcLow),
		cmdsBar(rl, barConcHigh),
		grantCmdsBar(f.contended["redlock"]),
		proxyCPUBar(f, barConcHigh),
		proxyCPUBar(f, barConcLow),
		acquireBar(rl),
		contendedRateBar("6", "redlock", f.contended["redlock"], "redsync", barContended),
		fairnessBar(f.contended["redlock"]),
	}
	out = append(out, degradedBars(f.faults)...)
	out = append(out, stateBars(f.state)...)
	out = append(out, embeddedBar(f.embedded),
		rateBar("zk", "zookeeper", zk, "zkrecipe", barConcLow, barZKOfRecipe1),
		rateBar("zk", "zookeeper", zk, "zkrecipe", barConcHigh, barZKOfRecipe32),
		contendedRateBar("zk", "zookeeper", f.contended["zookeeper"], "zkrecipe", barZKContended),
		zkProxyCPUBar(f))
	return append(out, rssBars(f.rss)...)
}

// rateBar: lockproxy's cycles/s at conc at least k times peer's.
func rateBar(id, backend string, results []outcome, peer string, conc int, k float64) bar {
	what := fmt.Sprintf("%s c=%d cycles/s", backend, conc)
	lp, ok1 := find(results, "lockproxy", conc)
	pe, ok2 := find(results, peer, conc)
	if !ok1 || !ok2 {
		return missing(id, what, notInRun)
	}
	return ratioBar(id, what, lp.rate(), peer, pe.rate(), fmtRate, k, true)
}

// nodeCPUBar (2): the CPU the redis-servers spent per cycle under lockproxy,
// at most k times under redsync, at conc.
func nodeCPUBar(results []outcome, conc int, k float64) bar {
	what := fmt.Sprintf("redlock c=%d node CPU per cycle (all nodes)", conc)
	lp, ok1 := find(results, "lockproxy", conc)
	rs, ok2 := find(results, "redsync", conc)
	if !ok1 || !ok2 || lp.cycles == 0 || rs.cycles == 0 {
		return missing("2", what, notInRun)
	}
	return ratioBar("2", what, perCycle(lp.cost.upstream, lp.cycles), "redsync", perCycle(rs.cost.upstream, rs.cycles), fmtMicros, k, false)
}

// cmdsBar (3): the commands the nodes ran per uncontended cycle at conc,
// Lua calls included, at most barCmdsPerCycle.
func cmdsBar(results []outcome, conc int) bar {
	what := fmt.Sprintf("redlock c=%d Redis commands per uncontended cycle (all nodes, Lua calls included)", conc)
	lp, ok := find(results, "lockproxy", conc)
	if !ok || lp.cycles == 0 {
		return missing("3", what, "not in this run")
	}
	peer, pe := "", 0.0
	if rs, ok := find(results, "redsync", conc); ok && rs.cycles > 0 {
		peer, pe = "redsync", float64(rs.cost.cmds)/float64(rs.cycles)
	}
	return constBar("3", what, float64(lp.cost.cmds)/float64(lp.cycles), peer, pe, fmtCount, barCmdsPerCycle,
		fmt.Sprintf("<= %d", barCmdsPerCycle))
}

// grantCmdsBar (3): the commands the nodes ran per contended grant, at most
// barCmdsPerGrant.
func grantCmdsBar(results []contendOutcome) bar {
	what := "redlock Redis commands per contended grant (all nodes, Lua calls included)"
	lp, ok := findContended(results, "lockproxy")
	if !ok || lp.grants() == 0 {
		return missing("3", what, "not in this run")
	}
	peer, pe := "", 0.0
	if rs, ok := findContended(results, "redsync"); ok && rs.grants() > 0 {
		peer, pe = "redsync", float64(rs.cost.cmds)/float64(rs.grants())
	}
	return constBar("3", what, float64(lp.cost.cmds)/float64(lp.grants()), peer, pe, fmtCount, barCmdsPerGrant,
		fmt.Sprintf("<= %d", barCmdsPerGrant))
}

// proxyCPUBar (4): lockproxy's own CPU per cycle at conc at most
// barProxyCPU times twemproxy's per cycle of the plain-Redis lock (SET NX
// PX, then the Lua release) through it.
func proxyCPUBar(f figures, conc int) bar {
	what := fmt.Sprintf("redlock c=%d proxy CPU per cycle", conc)
	if f.inprocess {
		return missing("4", what, "lockproxy runs in the bench's process (-inprocess)")
	}
	lp, ok1 := find(f.uncontended["redlock"], "lockproxy", conc)
	tw, ok2 := find(f.uncontended["redlock"], "twemproxy", conc)
	if !ok1 || !ok2 || lp.cycles == 0 || tw.cycles == 0 {
		return missing("4", what, notInRun)
	}
	return ratioBar("4", what, perCycle(lp.cost.proxy, lp.cycles), "twemproxy", perCycle(tw.cost.proxy, tw.cycles), fmtMicros, barProxyCPU, false)
}

// acquireBar (5): lockproxy's c=1 acquire p50 at most barAcquire times
// redsync's.
func acquireBar(results []outcome) bar {
	what := fmt.Sprintf("redlock c=%d acquire p50", barConcLow)
	lp, ok1 := find(results, "lockproxy", barConcLow)
	rs, ok2 := find(results, "redsync", barConcLow)
	if !ok1 || !ok2 || len(lp.acq) == 0 || len(rs.acq) == 0 {
		return missing("5", what, notInRun)
	}
	return ratioBar("5", what, float64(percentile(lp.acq, 0.5)), "redsync", float64(percentile(rs.acq, 0.5)), fmtDuration, barAcquire, false)
}

// contendedRateBar: lockproxy's contended grants/s at least k times peer's.
func contendedRateBar(id, backend string, results []contendOutcome, peer string, k float64) bar {
	what := fmt.Sprintf("%s contended grants/s", backend)
	lp, ok1 := findContended(results, "lockproxy")
	pe, ok2 := findContended(results, peer)
	if !ok1 || !ok2 {
		return missing(id, what, notInRun)
	}
	return ratioBar(id, what, lp.rate(), peer, pe.rate(), fmtRate, k, true)
}

// fairnessBar (6): every contended client within barFairness percent of the
// mean number of grants (redlock); redsync's figure beside it.
func fairnessBar(results []contendOutcome) bar {
	what := "redlock contended fairness, the worst client's distance from the mean grants"
	lp, ok := findContended(results, "lockproxy")
	if !ok || lp.grants() == 0 {
		return missing("6", what, "not in this run")
	}
	pct := func(x float64) string { return fmt.Sprintf("%.2f%%", x) }
	_, _, dev := fairness(lp.perClient)
	peer, pe := "", 0.0
	if rs, ok := findContended(results, "redsync"); ok && rs.grants() > 0 {
		_, _, pe = fairness(rs.perClient)
		peer = "redsync"
	}
	return constBar("6", what, dev, peer, pe, pct, barFairness, fmt.Sprintf("<= %g%%", barFairness))
}

// degradedBars (7): each faulty case at least barDegraded of the healthy one.
func degradedBars(rows []faultRow) []bar {
	if len(rows) == 0 {
		return []bar{missing("7", "degraded, one node paused or delayed", "not in this run")}
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
		what := fmt.Sprintf("redlock %s, %s, ops/s against healthy", r.what, r.fault)
		h, ok := healthy[r.what]
		if !ok {
			out = append(out, missing("7", what, "no healthy case"))
			continue
		}
		out = append(out, ratioBar("7", what, r.rate, "healthy", h.rate, fmtRate, barDegraded, true))
	}
	return out
}

// embeddedBar (9): c=32 cycles/s on fresh keys after the keys were locked,
// at least barEmbedded of the rate on the empty backend.
func embeddedBar(e *embeddedResult) bar {
	what := fmt.Sprintf("embedded c=%d cycles/s on fresh keys, after distinct keys locked once", barConcHigh)
	if e == nil {
		return missing("9", what, "not in this run")
	}
	what = fmt.Sprintf("embedded c=%d cycles/s on fresh keys, after %d distinct keys locked once", barConcHigh, e.keys)
	if e.fill.locked < int64(e.keys) {
		return bar{id: "9", what: what, measured: true, lp: fmt.Sprintf("locked only %d of %d keys in %v (%d refused, %d errors)",
			e.fill.locked, e.keys, e.fill.took.Round(time.Millisecond), e.fill.refused, e.fill.errors), limit: fmt.Sprintf(">= %gx", barEmbedded)}
	}
	return ratioBar("9", what, e.after.rate(), "empty backend", e.empty.rate(), fmtRate, barEmbedded, true)
}

// zkProxyCPUBar: lockproxy's CPU per cycle on ZooKeeper at c=1 at most
// barZKProxyCPU times its own c=32 figure.
func zkProxyCPUBar(f figures) bar {
	what := fmt.Sprintf("zookeeper proxy CPU per cycle, c=%d against c=%d", barConcLow, barConcHigh)
	if f.inprocess {
		return missing("zk", what, "lockproxy runs in the bench's process (-inprocess)")
	}
	lo, ok1 := find(f.uncontended["zookeeper"], "lockproxy", barConcLow)
	hi, ok2 := find(f.uncontended["zookeeper"], "lockproxy", barConcHigh)
	if !ok1 || !ok2 || lo.cycles == 0 || hi.cycles == 0 {
		return missing("zk", what, "both concurrencies not in this run")
	}
	return ratioBar("zk", what, perCycle(lo.cost.proxy, lo.cycles), fmt.Sprintf("lockproxy c=%d", barConcHigh),
		perCycle(hi.cost.proxy, hi.cycles), fmtMicros, barZKProxyCPU, false)
}

// rssBars: lockproxy's RSS with the idle connections and the held locks.
func rssBars(r *rssFigures) []bar {
	idle := fmt.Sprintf("RSS with %d idle connections", rssIdleConns)
	held := fmt.Sprintf("RSS with %d held locks", rssHeldLocks)
	if r == nil {
		return []bar{missing("mem", idle, "not in this run"), missing("mem", held, "not in this run")}
	}
	return []bar{rssBar(idle, r.idleConns, r.idleConnsErr, barIdleConnsBytes), rssBar(held, r.heldLocks, r.heldLocksErr, barHeldLocksBytes)}
}

func rssBar(what string, rss int64, err error, limit int64) bar {
	if err != nil {
		return missing("mem", what, err.Error())
	}
	return bar{id: "mem", what: what, measured: true, met: rss < limit, lp: fmtMB(rss), limit: fmt.Sprintf("< %d MB", limit>>20)}
}

// ptBars are the passthrough bars over the outcomes by concurrency, each
// in the order of targets; twemproxy's is at index tw (-1: not run).
func ptBars(byConc map[int][]ptOutcome, lp, tw int, inprocess bool) []bar {
	var out []bar
	for _, conc := range []int{barConcHigh, barConcLow} {
		what := fmt.Sprintf("passthrough c=%d commands/s", conc)
		r, ok := byConc[conc]
		if !ok || tw < 0 {
			out = append(out, missing("pt", what, notInRun))
			continue
		}
		out = append(out, ratioBar("pt", what, r[lp].rate, "twemproxy", r[tw].rate, fmtRate, barPTRate, true))
	}
	for _, conc := range []int{barConcHigh, barConcLow} {
		what := fmt.Sprintf("passthrough c=%d proxy CPU per forwarded command", conc)
		r, ok := byConc[conc]
		switch {
		case inprocess:
			out = append(out, missing("pt", what, "lockproxy runs in the bench's process (-inprocess)"))
		case !ok || tw < 0:
			out = append(out, missing("pt", what, notInRun))
		default:
			out = append(out, ratioBar("pt", what, float64(r[lp].proxyCPU), "twemproxy", float64(r[tw].proxyCPU), fmtCPUPerOp, barPTCPU, false))
		}
	}
	return out
}

func fmtCPUPerOp(ns float64) string { return fmt.Sprintf("%.1fµs", ns/1e3) }
