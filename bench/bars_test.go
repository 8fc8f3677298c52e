package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func us(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// barFigures is a run where every bar has its figures: 1000 cycles in one
// second per case unless set otherwise.
func barFigures() figures {
	cyc := func(impl string, conc int, cycles int64, acq time.Duration, c costs) outcome {
		return outcome{impl: impl, conc: conc, cycles: cycles, elapsed: time.Second, acq: []time.Duration{acq}, cost: c}
	}
	return figures{
		uncontended: map[string][]outcome{
			"redlock": {
				cyc("redis", 1, 9000, us(45), costs{upstream: ms(300)}),
				cyc("redsync", 1, 3000, us(120), costs{upstream: ms(450)}),                   // 150µs a cycle
				cyc("lockproxy", 1, 2000, us(250), costs{proxy: ms(200), upstream: ms(200)}), // 200µs: missed
				cyc("redis", 32, 30000, us(900), costs{upstream: ms(840)}),                   // 28µs
				cyc("redsync", 32, 7000, us(4000), costs{upstream: ms(700)}),
				cyc("lockproxy", 32, 21000, us(1500), costs{proxy: ms(600), upstream: ms(570)}), // 55.7µs: met
			},
			"zookeeper": {
				cyc("zkrecipe", 1, 700, ms(1), costs{}),
				cyc("lockproxy", 1, 700, ms(1), costs{}), // equal: met
				cyc("zkrecipe", 32, 4000, ms(8), costs{}),
				cyc("lockproxy", 32, 7000, ms(4), costs{}), // 1.75x: missed
			},
		},
		contended: map[string][]contendOutcome{
			"redlock": {{impl: "lockproxy", perClient: []int64{1000, 1000, 1010, 990}, wait: []time.Duration{us(500), us(900), ms(3)}}},
		},
		faults: []faultRow{
			{fault: healthyFault, what: "conc 1", rate: 1000},
			{fault: healthyFault, what: "contended 8", rate: 500},
			{fault: "paused", what: "conc 1", rate: 800},
			{fault: "paused", what: "contended 8", rate: 399},
		},
		rss: &rssFigures{idleConns: 99 << 20, heldLocks: 200 << 20},
	}
}

func TestBars(t *testing.T) {
	got := bars(barFigures())
	want := []string{
		"bar redlock c=32 cycles/s lockproxy >= 0.5x redis: 21000 against 30000, 0.70x: met",
		"bar redlock c=32 cycles/s lockproxy >= 3x redsync: 21000 against 7000, 3.00x: met",
		"bar redlock c=32 server CPU per cycle lockproxy+nodes <= 2x redis's: 56µs (29µs lockproxy + 27µs nodes) against 28µs: met",
		"bar redlock c=1 server CPU per cycle lockproxy+nodes <= 1x redsync's: 200µs (100µs lockproxy + 100µs nodes) against 150µs: missed",
		"bar redlock c=1 acquire p50 lockproxy <= redsync's: 250µs against 120µs: missed",
		"bar redlock contended wait p50 lockproxy <= 1ms: 900µs against 1ms: met",
		"bar redlock contended fairness: every client within 1% of the mean grants: worst deviation 1.00% (fewest 990, most 1010) against 1%: met",
		"bar zookeeper c=1 cycles/s lockproxy >= 1x zkrecipe: 700 against 700, 1.00x: met",
		"bar zookeeper c=32 cycles/s lockproxy >= 2x zkrecipe: 7000 against 4000, 1.75x: missed",
		"bar degraded paused conc 1 ops/s >= 0.8x healthy: 800 against 1000, 0.80x: met",
		"bar degraded paused contended 8 ops/s >= 0.8x healthy: 399 against 500, 0.80x: missed",
		"bar RSS with 10000 idle connections < 100 MB: 99.0 MB against 100 MB: met",
		"bar RSS with 100000 held locks < 200 MB: 200.0 MB against 200 MB: missed",
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

func TestBarsNotMeasured(t *testing.T) {
	f := barFigures()
	f.inprocess = true
	f.uncontended["zookeeper"] = f.uncontended["zookeeper"][:2] // no c=32
	f.rss = &rssFigures{idleConns: 1, heldLocksErr: errors.New("LOCK replied [] nil")}
	f.faults = nil
	lines := map[int]string{}
	for i, b := range bars(f) {
		lines[i] = b.String()
	}
	for i, suffix := range map[int]string{
		2:  "not measured (lockproxy runs in the bench's process (-inprocess))",
		8:  "not measured (both sides not in this run)",
		9:  "degraded node >= 0.8x healthy: not measured (not in this run)",
		11: "not measured (LOCK replied [] nil)",
	} {
		if !strings.HasSuffix(lines[i], suffix) {
			t.Errorf("bar %d = %q, want suffix %q", i, lines[i], suffix)
		}
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
