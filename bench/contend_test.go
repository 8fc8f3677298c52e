package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
)

func TestFairness(t *testing.T) {
	tests := []struct {
		per          []int64
		fewest, most int64
		dev          float64
	}{
		{[]int64{10, 10, 10, 10}, 10, 10, 0},
		{[]int64{8, 12}, 8, 12, 20},        // mean 10: both 20% off
		{[]int64{0, 0, 0, 40}, 0, 40, 300}, // mean 10: the one that took all is 300% over
		{[]int64{5, 10, 15, 10}, 5, 15, 50},
		{[]int64{0, 0}, 0, 0, 0},
		{nil, 0, 0, 0},
	}
	for _, tt := range tests {
		fewest, most, dev := fairness(tt.per)
		if fewest != tt.fewest || most != tt.most || math.Abs(dev-tt.dev) > 1e-9 {
			t.Errorf("fairness(%v) = %d, %d, %v; want %d, %d, %v", tt.per, fewest, most, dev, tt.fewest, tt.most, tt.dev)
		}
	}
}

// g is a grant asked, granted and released at the given milliseconds.
func g(asked, granted, released int) grant {
	return grant{asked: ms(asked), granted: ms(granted), released: ms(released)}
}

func TestHandoffGaps(t *testing.T) {
	tests := []struct {
		name string
		gs   []grant
		want []time.Duration
	}{
		{"none", nil, nil},
		{"one grant has no predecessor", []grant{g(0, 1, 2)}, nil},
		{"queued waiters, out of order", []grant{g(0, 13, 14), g(0, 1, 5), g(0, 7, 10)}, []time.Duration{ms(2), ms(3)}},
		// The next grant arrived before the previous holder heard its
		// release was done: the lock was never seen free.
		{"overlap counts 0", []grant{g(0, 1, 5), g(0, 4, 6)}, []time.Duration{0}},
		// Nobody waited from 5 to 8: the gap starts when the next client asked.
		{"free with nobody waiting", []grant{g(0, 1, 5), g(8, 9, 10)}, []time.Duration{ms(1)}},
		// The client granted third waited since 0, through the gap before
		// the second grant, though the second one asked only at 7.
		{"another waiter counts", []grant{g(0, 1, 5), g(7, 8, 9), g(0, 12, 13)}, []time.Duration{ms(3), ms(3)}},
	}
	for _, tt := range tests {
		if got := handoffGaps(tt.gs); !slices.Equal(got, tt.want) {
			t.Errorf("%s: handoffGaps = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWaits(t *testing.T) {
	gs := []grant{g(0, 9, 10), g(2, 3, 4), g(5, 10, 11)}
	if got, want := waits(gs), []time.Duration{ms(1), ms(5), ms(9)}; !slices.Equal(got, want) {
		t.Fatalf("waits = %v, want %v", got, want)
	}
	if got, want := helds(gs), []time.Duration{ms(1), ms(1), ms(1)}; !slices.Equal(got, want) {
		t.Fatalf("helds = %v, want %v", got, want)
	}
	// g(2,3,4) found it free; g(0,9,10) waited behind it; g(5,10,11) asked
	// after 9's grant, at 5 < 9: behind it too.
	if got, want := waitsBehind(gs), []time.Duration{ms(5), ms(9)}; !slices.Equal(got, want) {
		t.Fatalf("waitsBehind = %v, want %v", got, want)
	}
	// A releaser that takes the lock again at once waited behind nobody.
	if got := waitsBehind([]grant{g(0, 1, 2), g(2, 3, 4), g(4, 5, 6)}); len(got) != 0 {
		t.Fatalf("waitsBehind(re-takes) = %v, want none", got)
	}
}

// fakeContender grants every other lock, fails the unlock once, and counts.
type fakeContender struct {
	locks, unlocks int
}

func (f *fakeContender) lock(context.Context) error {
	f.locks++
	if f.locks%2 == 0 {
		return fmt.Errorf("LOCK: %w (null reply)", errNotAcquired)
	}
	return nil
}

func (f *fakeContender) unlock(context.Context) error {
	f.unlocks++
	if f.unlocks == 1 {
		return errors.New("UNLOCK: boom")
	}
	return nil
}

func (f *fakeContender) close() error { return nil }

func TestContendClientCounts(t *testing.T) {
	f := &fakeContender{}
	c := &contendClient{c: f}
	s := contendSpec{timeout: time.Second}
	clock := time.Now()
	for range 4 {
		c.one(context.Background(), s, clock)
	}
	if len(c.grants) != 2 || c.gaveUp != 2 || c.failed != 1 || f.unlocks != 2 {
		t.Fatalf("grants %d gave up %d failed %d unlocks %d", len(c.grants), c.gaveUp, c.failed, f.unlocks)
	}
	for _, gr := range c.grants {
		if gr.asked > gr.granted || gr.granted > gr.released {
			t.Fatalf("grant out of order: %+v", gr)
		}
	}
}

func TestLostToHolder(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{redsync.ErrFailed, true},
		{&redsync.ErrTaken{Nodes: []int{0, 1}}, true},
		{errors.Join(&redsync.ErrNodeTaken{Node: 0}, &redsync.ErrNodeTaken{Node: 2}), true},
		{errors.Join(&redsync.ErrNodeTaken{Node: 0}, &redsync.RedisError{Node: 1, Err: errors.New("i/o timeout")}), false},
		{errors.New("dial tcp: refused"), false},
	}
	for _, tt := range tests {
		if got := lostToHolder(tt.err); got != tt.want {
			t.Errorf("lostToHolder(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestWriteContended(t *testing.T) {
	results := []contendOutcome{
		{impl: "lockproxy", elapsed: time.Second, perClient: []int64{99, 101},
			wait: []time.Duration{ms(1)}, gap: []time.Duration{0}, held: []time.Duration{300 * time.Microsecond},
			behind: []time.Duration{ms(1), ms(1)}},
		{impl: "redsync", elapsed: time.Second, perClient: []int64{10, 190}, gaveUp: 3,
			wait: []time.Duration{ms(100)}, gap: []time.Duration{ms(2)}, behind: []time.Duration{ms(300)}},
	}
	var sb strings.Builder
	writeContended(&sb, suites[0], results, 2, 0)
	want := []string{
		"contended: 2 clients, 1 key, hold 0s; lockproxy LOCK PX 10000 WAIT 30000, redsync Lock with its default retries (plain redis: no contended case)",
		"impl       grants  grants/s  wait p50   wait p99   gap p50    gap p99    held p50   fewest  most    max dev  gave up  errors",
		"redsync    200     200       100ms      100ms      2ms        2ms        -          10      190     90.0%    3        0",
		"lockproxy  200     200       1ms        1ms        0s         0s         300µs      99      101     1.0%     0        0",
		"waited behind another client's grant: redsync 0.5% of grants, wait p50 300ms p99 300ms; lockproxy 1.0% of grants, wait p50 1ms p99 1ms",
		"ratio wait p50 redsync/lockproxy: 100x (over the grants that waited behind another client's: 300x)",
		"",
	}
	if got := strings.Split(sb.String(), "\n"); !slices.Equal(got, want) {
		t.Fatalf("table:\n%s\nwant:\n%s", sb.String(), strings.Join(want, "\n"))
	}
}

func TestParseFlagsContended(t *testing.T) {
	o, err := parseFlags([]string{"-concurrency", "", "-hold", "100us"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.conc) != 0 || o.contended != 8 || o.hold != 100*time.Microsecond {
		t.Fatalf("conc %v contended %d hold %v", o.conc, o.contended, o.hold)
	}
	if o, err := parseFlags([]string{"-concurrency", "", "-contended", "0", "-faults=false", "-state=false", "-embedded=false"}); err != nil || o.hasCases() || !o.rss {
		t.Errorf("the RSS cases alone: %+v %v", o, err)
	}
	for _, bad := range [][]string{{"-concurrency", "", "-contended", "0", "-faults=false", "-rss=false", "-state=false", "-embedded=false"},
		{"-contended", "-1"}, {"-hold", "-1ms"}, {"-state-keys", "0"}, {"-state-keys", ""}, {"-embedded-keys", "0"}, {"-fill-bound", "0s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

// TestContendedSkipsBaseline: a target with no way to wait (the plain Redis
// baseline) has no contended case.
func TestContendedSkipsBaseline(t *testing.T) {
	o := options{contended: 8}
	if got := measureContendedCase(context.Background(), o, []*target{{name: "redis"}}, nil); len(got) != 0 {
		t.Fatalf("contended results for the baseline: %v", got)
	}
}
