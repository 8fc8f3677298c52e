package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func us(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// barFigures is a run where every bar has its figures, each case measured
// for one second, most of them right at their limit.
func barFigures() figures {
	cyc := func(impl string, conc int, cycles int64, acq time.Duration, c costs) outcome {
		return outcome{impl: impl, conc: conc, cycles: cycles, elapsed: time.Second, acq: []time.Duration{acq}, cost: c}
	}
	grants := func(impl string, c costs, perClient ...int64) contendOutcome {
		return contendOutcome{impl: impl, elapsed: time.Second, perClient: perClient, cost: c}
	}
	node := func(keys, lp, kib int64) nodeState { return nodeState{keys: keys, lpKeys: lp, memory: kib << 10} }
	return figures{
		uncontended: map[string][]outcome{
			"redlock": {
				cyc("twemproxy", 1, 4000, us(90), costs{proxy: ms(200)}),                                            // 50µs a cycle
				cyc("redsync", 1, 3000, us(120), costs{upstream: ms(450), cmds: 36000}),                             // 150µs, 12 commands
				cyc("lockproxy", 1, 2000, us(144), costs{proxy: ms(200), upstream: ms(300), cmds: 36000}),           // 100µs, 150µs, 18
				cyc("twemproxy", 32, 20000, us(900), costs{proxy: ms(400)}),                                         // 20µs
				cyc("redsync", 32, 7000, us(4000), costs{upstream: ms(700), cmds: 84000}),                           // 100µs, 12
				cyc("lockproxy", 32, 10500, us(1500), costs{proxy: us(430500), upstream: us(535500), cmds: 199500}), // 41µs, 51µs, 19
			},
			"zookeeper": {
				cyc("zkrecipe", 1, 700, ms(1), costs{}),
				cyc("lockproxy", 1, 840, ms(1), costs{proxy: us(168000)}), // 200µs
				cyc("zkrecipe", 32, 4000, ms(8), costs{}),
				cyc("lockproxy", 32, 7000, ms(4), costs{proxy: ms(700)}), // 100µs
			},
		},
		contended: map[string][]contendOutcome{
			"redlock": {
				grants("redsync", costs{cmds: 33600}, 700, 700, 700, 700),
				grants("lockproxy", costs{cmds: 108000}, 1000, 1000, 1010, 990),
			},
			"zookeeper": {grants("zkrecipe", costs{}, 500, 500), grants("lockproxy", costs{}, 750, 750)},
		},
		faults: []faultRow{
			{fault: healthyFault, what: "conc 1", rate: 1000},
			{fault: healthyFault, what: "contended 8", rate: 500},
			{fault: "paused", what: "conc 1", rate: 800},
			{fault: "paused", what: "contended 8", rate: 399},
		},
		state: []stateRun{
			{keys: 10000, fill: fillResult{locked: 10000}, grace: 30 * time.Second,
				start: []nodeState{node(6, 5, 1000), node(6, 5, 1000)},
				end:   []nodeState{node(22, 21, 1512), node(6, 5, 1000)}}, // +16 keys, +512 KiB: met
			{keys: 100000, fill: fillResult{locked: 100000}, grace: 30 * time.Second,
				start: []nodeState{node(6, 5, 1000), node(6, 5, 1000)},
				end:   []nodeState{node(6, 5, 1000), node(23, 5, 1000)}}, // +17 keys: missed
		},
		embedded: &embeddedResult{keys: 100000, fill: fillResult{locked: 100000},
			empty: cyc("lockproxy", 32, 1000, ms(1), costs{}), after: cyc("lockproxy", 32, 800, ms(1), costs{})},
		rss: &rssFigures{idleConns: 99 << 20, heldLocks: 200 << 20},
	}
}

func TestBars(t *testing.T) {
	got := bars(barFigures())
	want := []string{
		"bar 1 redlock c=32 cycles/s: lockproxy 10500, redsync 7000, ratio 1.50x, limit >= 1.5x: met",
		"bar 2 redlock c=32 node CPU per cycle (all nodes): lockproxy 51µs, redsync 100µs, ratio 0.51x, limit <= 0.5x: missed",
		"bar 2 redlock c=1 node CPU per cycle (all nodes): lockproxy 150µs, redsync 150µs, ratio 1.00x, limit <= 1x: met",
		"bar 3 redlock c=1 Redis commands per uncontended cycle (all nodes, Lua calls included): lockproxy 18.0, redsync 12.0, limit <= 18: met",
		"bar 3 redlock c=32 Redis commands per uncontended cycle (all nodes, Lua calls included): lockproxy 19.0, redsync 12.0, limit <= 18: missed",
		"bar 3 redlock Redis commands per contended grant (all nodes, Lua calls included): lockproxy 27.0, redsync 12.0, limit <= 27: met",
		"bar 4 redlock c=32 proxy CPU per cycle: lockproxy 41µs, twemproxy 20µs, ratio 2.05x, limit <= 2x: missed",
		"bar 4 redlock c=1 proxy CPU per cycle: lockproxy 100µs, twemproxy 50µs, ratio 2.00x, limit <= 2x: met",
		"bar 5 redlock c=1 acquire p50: lockproxy 144µs, redsync 120µs, ratio 1.20x, limit <= 1.2x: met",
		"bar 6 redlock contended grants/s: lockproxy 4000, redsync 2800, ratio 1.43x, limit >= 1.5x: missed",
		"bar 6 redlock contended fairness, the worst client's distance from the mean grants: lockproxy 1.00%, redsync 0.00%, limit <= 1%: met",
		"bar 7 redlock conc 1, paused, ops/s against healthy: lockproxy 800, healthy 1000, ratio 0.80x, limit >= 0.8x: met",
		"bar 7 redlock contended 8, paused, ops/s against healthy: lockproxy 399, healthy 500, ratio 0.80x, limit >= 0.8x: missed",
		"bar 8 node state after 10000 distinct keys locked once, the largest growth of a node once their leases ended (waited up to 30s): " +
			"lockproxy +16 keys (+16 lockproxy:*, 0.002 per locked key), +512 KiB used_memory, limit +16 keys and +512 KiB used_memory a node, whatever the key count: met",
		"bar 8 node state after 100000 distinct keys locked once, the largest growth of a node once their leases ended (waited up to 30s): " +
			"lockproxy +17 keys (+0 lockproxy:*, 0.000 per locked key), +0 KiB used_memory, limit +16 keys and +512 KiB used_memory a node, whatever the key count: missed",
		"bar 9 embedded c=32 cycles/s on fresh keys, after 100000 distinct keys locked once: lockproxy 800, empty backend 1000, ratio 0.80x, limit >= 0.8x: met",
		"bar zk zookeeper c=1 cycles/s: lockproxy 840, zkrecipe 700, ratio 1.20x, limit >= 1.2x: met",
		"bar zk zookeeper c=32 cycles/s: lockproxy 7000, zkrecipe 4000, ratio 1.75x, limit >= 2x: missed",
		"bar zk zookeeper contended grants/s: lockproxy 1500, zkrecipe 1000, ratio 1.50x, limit >= 1.5x: met",
		"bar zk zookeeper proxy CPU per cycle, c=1 against c=32: lockproxy 200µs, lockproxy c=32 100µs, ratio 2.00x, limit <= 2x: met",
		"bar mem RSS with 10000 idle connections: lockproxy 99.0 MB, limit < 100 MB: met",
		"bar mem RSS with 100000 held locks: lockproxy 200.0 MB, limit < 200 MB: missed",
	}
	if len(got) != len(want) {
		t.Fatalf("%d bars, want %d:\n%v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("bar %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// TestBarsMissedBeyondLimit: one step past each limit that TestBars meets
// exactly turns the bar to missed.
func TestBarsMissedBeyondLimit(t *testing.T) {
	f := barFigures()
	rl := f.uncontended["redlock"]
	rl[5].cycles = 10499                       // bar 1: just below 1.5x redsync
	rl[2].cost.upstream = ms(300) + us(1)      // bar 2 c=1: just above redsync's
	rl[2].cost.cmds = 36001                    // bar 3 c=1: above 18
	rl[2].cost.proxy = ms(200) + us(1)         // bar 4 c=1: above 2x twemproxy's
	rl[2].acq = []time.Duration{us(145)}       // bar 5: above 1.2x
	f.contended["redlock"][1].cost.cmds += 100 // bar 3 contended: above 27
	f.contended["redlock"][1].perClient[2]++   // bar 6 fairness: above 1%
	f.faults[2].rate = 799                     // bar 7: below 0.8x
	f.state[0].end[1].memory += 1              // bar 8: a second node, 1 byte above its start: still met...
	f.state[0].end[0].memory += 1              // ...but the first is now 1 byte beyond the slack
	f.embedded.after.cycles = 799              // bar 9
	zk := f.uncontended["zookeeper"]
	zk[1].cycles = 839                             // zk c=1
	f.contended["zookeeper"][1].perClient[0] = 749 // zk contended
	zk[3].cost.proxy = ms(700) - us(7)             // zk proxy CPU: c=1 above 2x c=32's
	f.rss.idleConns = 100 << 20
	for i, b := range bars(f) {
		if i == 1 || i == 4 || i == 6 || i == 9 || i == 12 || i == 14 || i == 17 || i == 21 { // missed already
			continue
		}
		if !b.measured || b.met {
			t.Errorf("bar %d past its limit: %s", i, b)
		}
	}
}

func TestBarsNotMeasured(t *testing.T) {
	f := barFigures()
	f.inprocess = true
	f.uncontended["zookeeper"] = f.uncontended["zookeeper"][:2] // no c=32
	f.uncontended["redlock"] = f.uncontended["redlock"][1:]     // no twemproxy at c=1
	f.rss = &rssFigures{idleConns: 1, heldLocksErr: errors.New("LOCK replied [] nil")}
	f.faults, f.state, f.embedded = nil, nil, nil
	lines := map[int]string{}
	for i, b := range bars(f) {
		lines[i] = b.String()
	}
	for i, suffix := range map[int]string{
		6:  "bar 4 redlock c=32 proxy CPU per cycle: not measured (lockproxy runs in the bench's process (-inprocess))",
		11: "bar 7 degraded, one node paused or delayed: not measured (not in this run)",
		12: "bar 8 node state after distinct keys locked once: not measured (not in this run)",
		13: "bar 9 embedded c=32 cycles/s on fresh keys, after distinct keys locked once: not measured (not in this run)",
		15: "bar zk zookeeper c=32 cycles/s: not measured (both sides not in this run)",
		17: "bar zk zookeeper proxy CPU per cycle, c=1 against c=32: not measured (lockproxy runs in the bench's process (-inprocess))",
		19: "not measured (LOCK replied [] nil)",
	} {
		if !strings.HasSuffix(lines[i], suffix) {
			t.Errorf("bar %d = %q, want suffix %q", i, lines[i], suffix)
		}
	}
	// Node CPU is the redis-servers', measured apart even in-process.
	if !strings.HasSuffix(lines[2], ": met") {
		t.Errorf("bar 2 c=1 in-process = %q, want measured", lines[2])
	}
}

// TestStateBarsWantEveryKeyLocked: a fill that locked fewer keys than asked
// misses the bar, and a node that could not be read is not measured.
func TestStateBarsWantEveryKeyLocked(t *testing.T) {
	runs := barFigures().state[:1]
	runs[0].fill.locked = 9999
	if b := stateBars(runs)[0]; !b.measured || b.met || !strings.Contains(b.String(), "but only 9999 of 10000 keys locked") {
		t.Errorf("short fill: %s", b)
	}
	runs[0].end[1].err = errors.New("DBSIZE: EOF")
	if b := stateBars(runs)[0]; b.measured || !strings.HasSuffix(b.String(), "not measured (node 2: DBSIZE: EOF)") {
		t.Errorf("unreadable node: %s", b)
	}
}

func TestEmbeddedBarShortFill(t *testing.T) {
	e := barFigures().embedded
	e.fill = fillResult{locked: 1931, errors: 69, took: time.Minute}
	b := embeddedBar(e)
	want := "bar 9 embedded c=32 cycles/s on fresh keys, after 100000 distinct keys locked once: " +
		"lockproxy locked only 1931 of 100000 keys in 1m0s (0 refused, 69 errors), limit >= 0.8x: missed"
	if b.String() != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestPassthroughBars(t *testing.T) {
	byConc := map[int][]ptOutcome{
		32: {{rate: 50000}, {rate: 30000, proxyCPU: us(10)}, {rate: 30000, proxyCPU: us(13)}},
		1:  {{rate: 9000}, {rate: 5000, proxyCPU: us(40)}, {rate: 4999, proxyCPU: us(53)}},
	}
	want := []string{
		"bar pt passthrough c=32 commands/s: lockproxy 30000, twemproxy 30000, ratio 1.00x, limit >= 1x: met",
		"bar pt passthrough c=1 commands/s: lockproxy 4999, twemproxy 5000, ratio 1.00x, limit >= 1x: missed",
		"bar pt passthrough c=32 proxy CPU per forwarded command: lockproxy 13.0µs, twemproxy 10.0µs, ratio 1.30x, limit <= 1.3x: met",
		"bar pt passthrough c=1 proxy CPU per forwarded command: lockproxy 53.0µs, twemproxy 40.0µs, ratio 1.32x, limit <= 1.3x: missed",
	}
	for i, b := range ptBars(byConc, 2, 1, false) {
		if b.String() != want[i] {
			t.Errorf("bar %d:\n got %s\nwant %s", i, b, want[i])
		}
	}
	for _, b := range ptBars(byConc, 1, -1, false) {
		if b.measured {
			t.Errorf("without twemproxy: %s", b)
		}
	}
	if b := ptBars(byConc, 2, 1, true)[2]; b.measured {
		t.Errorf("in-process: %s", b)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis, as /proc allows.
	stat := "4242 (redis-server (x) *) S 1 4242 4242 0 -1 4194560 1450 0 0 0 123 45 0 0 20 0 5 0 1234 0 0"
	if got := parseStatCPU(stat); got != 168*clockTick {
		t.Fatalf("parseStatCPU = %v, want %v", got, 168*clockTick)
	}
	if got := parseStatCPU("garbage"); got != 0 {
		t.Fatalf("parseStatCPU(garbage) = %v, want 0", got)
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tlockproxy\nVmPeak:\t  900000 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 100 kB\n"
	if got, err := parseVmRSS(status); err != nil || got != 12345<<10 {
		t.Fatalf("parseVmRSS = %d, %v; want %d", got, err, 12345<<10)
	}
	if _, err := parseVmRSS("Name:\tx\n"); err == nil {
		t.Fatal("parseVmRSS without VmRSS succeeded")
	}
}
