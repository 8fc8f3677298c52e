package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

var zkSuite = suites[1]

func TestSuites(t *testing.T) {
	if suites[0].backend != "redlock" || suites[0].peer != "redsync" || zkSuite.backend != "zookeeper" || zkSuite.peer != "zkrecipe" {
		t.Fatalf("suites %+v", suites)
	}
	if got := zkSuite.proxyArgs([]string{"127.0.0.1:2181"}); !slices.Equal(got, []string{"--backend", "zookeeper", "--zk", "127.0.0.1:2181"}) {
		t.Errorf("zookeeper proxyArgs %q", got)
	}
	if got := suites[0].proxyArgs([]string{"a:1", "b:2"}); !slices.Equal(got, []string{"--backend", "redlock", "--nodes", "a:1,b:2"}) {
		t.Errorf("redlock proxyArgs %q", got)
	}
}

func TestParseFlagsBackend(t *testing.T) {
	backends := func(o options) []string {
		var out []string
		for _, s := range o.suites {
			out = append(out, s.backend)
		}
		return out
	}
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(backends(o), []string{"redlock", "zookeeper"}) || !slices.Equal(o.impls, allImpls) || !o.faults || !o.rss {
		t.Fatalf("default: backends %v impls %v", backends(o), o.impls)
	}
	if !o.runs(zkSuite, "zkrecipe") || !o.runs(zkSuite, "lockproxy") || o.runs(zkSuite, "redsync") || o.runs(suites[0], "zkrecipe") {
		t.Fatal("runs: the peers belong to their own backends")
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-backend", "zookeeper"}, []string{"zookeeper"}},
		{[]string{"-backend", "zookeeper, redlock"}, []string{"redlock", "zookeeper"}},
		{[]string{"-impl", "redsync"}, []string{"redlock"}}, // zookeeper has nothing to run
		{[]string{"-impl", "zkrecipe"}, []string{"zookeeper"}},
		{[]string{"-impl", "lockproxy"}, []string{"redlock", "zookeeper"}},
	}
	for _, tt := range tests {
		o, err := parseFlags(tt.args)
		if err != nil || !slices.Equal(backends(o), tt.want) {
			t.Errorf("parseFlags(%q): backends %v, %v; want %v", tt.args, backends(o), err, tt.want)
		}
	}
	for _, bad := range [][]string{{"-backend", "etcd"}, {"-backend", ""}, {"-backend", "zookeeper", "-impl", "redsync"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

func TestZKVersion(t *testing.T) {
	srvr := "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\nLatency min/avg/max: 0/0.0/0\nMode: standalone\n"
	if got := zkVersion(srvr); got != "3.8.0" {
		t.Errorf("zkVersion = %q, want 3.8.0", got)
	}
	if got := zkVersion(""); got != "?" {
		t.Errorf("zkVersion(\"\") = %q, want ?", got)
	}
}

func TestWriteTableZooKeeper(t *testing.T) {
	results := []outcome{
		{impl: "lockproxy", conc: 1, cycles: 300, elapsed: time.Second, lat: []time.Duration{ms(1)}},
		{impl: "zkrecipe", conc: 1, cycles: 400, elapsed: time.Second, lat: []time.Duration{ms(2)}},
		{impl: "redsync", conc: 1, cycles: 100, elapsed: time.Second}, // not of this backend
	}
	var sb strings.Builder
	writeTable(&sb, zkSuite, results, []int{1})
	want := "impl       conc  cycles    cycles/s   acq p50    acq p99    cycle p50  errors\n" +
		"zkrecipe   1     400       400        -          -          2ms        0\n" +
		"lockproxy  1     300       300        -          -          1ms        0\n" +
		"ratio lockproxy/zkrecipe at conc 1: 0.75x\n"
	if sb.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", sb.String(), want)
	}
}

func TestWriteCosts(t *testing.T) {
	results := []outcome{
		{impl: "zkrecipe", conc: 1, cycles: 100, cost: costs{bench: ms(10), upstream: ms(50), cmds: 300}},
		{impl: "lockproxy", conc: 1, cycles: 100, cost: costs{bench: ms(5), proxy: ms(20), upstream: ms(80), cmds: 600, reads: 7}},
	}
	var sb strings.Builder
	writeCosts(&sb, zkSuite, results, []int{1}, false)
	want := "\nper cycle  conc  server-cpu bench-cpu  proxy-cpu      zk-cpu     zk-requests\n" +
		"zkrecipe   1     500µs      100µs      0µs            500µs      3.0\n" +
		"lockproxy  1     1000µs     50µs       200µs          800µs      6.0\n"
	if sb.String() != want {
		t.Fatalf("zookeeper costs:\n%s\nwant:\n%s", sb.String(), want)
	}
	results[0].impl = "redsync"
	sb.Reset()
	writeCosts(&sb, suites[0], results, []int{1}, true)
	want = "\nper cycle  conc  server-cpu bench-cpu  (in bench)     nodes-cpu  redis-cmds  redis-reads\n" +
		"redsync    1     -          100µs      0µs            500µs      3.0         0.0\n" +
		"lockproxy  1     -          50µs       200µs          800µs      6.0         0.1\n"
	if sb.String() != want {
		t.Fatalf("redlock costs:\n%s\nwant:\n%s", sb.String(), want)
	}
}

func TestWriteContendedZooKeeper(t *testing.T) {
	results := []contendOutcome{
		{impl: "lockproxy", elapsed: time.Second, perClient: []int64{50, 50},
			wait: []time.Duration{ms(4)}, gap: []time.Duration{ms(1)}, held: []time.Duration{ms(1)}, behind: []time.Duration{ms(4)}},
		{impl: "zkrecipe", elapsed: time.Second, perClient: []int64{100, 100},
			wait: []time.Duration{ms(2)}, gap: []time.Duration{0}, held: []time.Duration{ms(1)}, behind: []time.Duration{ms(2)}},
	}
	var sb strings.Builder
	writeContended(&sb, zkSuite, results, 2, 0)
	want := []string{
		"contended: 2 clients, 1 key, hold 0s; lockproxy LOCK PX 10000 WAIT 30000, zkrecipe zk.Lock on a session per client (no timeout: cut at 35s by closing the session)",
		"impl       grants  grants/s  wait p50   wait p99   gap p50    gap p99    held p50   fewest  most    max dev  gave up  errors",
		"zkrecipe   200     200       2ms        2ms        0s         0s         1ms        100     100     0.0%     0        0",
		"lockproxy  100     100       4ms        4ms        1ms        1ms        1ms        50      50      0.0%     0        0",
		"waited behind another client's grant: zkrecipe 0.5% of grants, wait p50 2ms p99 2ms; lockproxy 1.0% of grants, wait p50 4ms p99 4ms",
		"ratio wait p50 zkrecipe/lockproxy: 0.50x (over the grants that waited behind another client's: 0.50x); grants/s lockproxy/zkrecipe: 0.50x",
		"",
	}
	if got := strings.Split(sb.String(), "\n"); !slices.Equal(got, want) {
		t.Fatalf("table:\n%s\nwant:\n%s", sb.String(), strings.Join(want, "\n"))
	}
}

func TestRunBounded(t *testing.T) {
	var wg sync.WaitGroup
	boom := errors.New("boom")
	if err := runBounded(context.Background(), &wg, func() error { return boom }); err != boom {
		t.Fatalf("runBounded = %v, want f's error", err)
	}
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := runBounded(ctx, &wg, func() error { <-release; return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("runBounded of a blocked f = %v, want the deadline", err)
	}
	if err := waitGroupWithin(&wg, 10*time.Millisecond); err == nil {
		t.Fatal("waitGroupWithin returned while f was blocked")
	}
	close(release)
	if err := waitGroupWithin(&wg, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestSessionClosed(t *testing.T) {
	err := sessionClosed(context.Canceled, zk.ErrConnectionClosed)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, zk.ErrConnectionClosed) ||
		err.Error() != "session closed: context canceled (zk: connection closed)" {
		t.Fatalf("sessionClosed = %v", err)
	}
	if err := sessionClosed(context.DeadlineExceeded, nil); err.Error() != "session closed: context deadline exceeded" {
		t.Fatalf("sessionClosed(nil) = %v", err)
	}
}
