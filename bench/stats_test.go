package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, ms(i))
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{{0.50, ms(50)}, {0.99, ms(99)}, {1, ms(100)}, {0.001, ms(1)}}
	for _, tt := range tests {
		if got := percentile(sorted, tt.p); got != tt.want {
			t.Errorf("percentile(1..100ms, %v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	if got := percentile([]time.Duration{ms(7)}, 0.99); got != ms(7) {
		t.Errorf("percentile(one sample) = %v, want 7ms", got)
	}
}

func TestReservoirKeepsAtMostCap(t *testing.T) {
	r := newReservoir(10, 1)
	for i := range 1000 {
		r.add(ms(i))
	}
	if len(r.samples()) != 10 || r.seen != 1000 {
		t.Fatalf("kept %d of %d, want 10 of 1000", len(r.samples()), r.seen)
	}
	r = newReservoir(10, 1)
	for i := range 5 {
		r.add(ms(i))
	}
	if !slices.Equal(r.samples(), []time.Duration{0, ms(1), ms(2), ms(3), ms(4)}) {
		t.Fatalf("below cap kept %v, want every sample", r.samples())
	}
}

func TestErrorLogBoundsKinds(t *testing.T) {
	var a, b errorLog
	for i := range maxErrorKinds + 3 {
		a.add(errors.New(strings.Repeat("x", i+1)))
	}
	b.add(errors.New("x"))
	a.merge(b)
	lines := a.lines()
	if len(lines) != maxErrorKinds+1 || lines[0] != "2 x x" || lines[len(lines)-1] != "3 x (other messages)" {
		t.Fatalf("lines = %q", lines)
	}
}

func TestWriteTable(t *testing.T) {
	results := []outcome{
		{impl: "lockproxy", conc: 1, cycles: 300, elapsed: time.Second, lat: []time.Duration{ms(1), ms(2)}, acq: []time.Duration{us(400), ms(1)}},
		{impl: "redsync", conc: 1, cycles: 200, elapsed: time.Second, lat: []time.Duration{ms(3)}, errors: 1},
	}
	results[1].errs.add(errors.New("lock: boom"))
	var sb strings.Builder
	writeTable(&sb, suites[0], results, []int{1})
	want := "impl       conc  cycles    cycles/s   acq p50    acq p99    cycle p50  errors\n" +
		"redsync    1     200       200        -          -          3ms        1\n" +
		"lockproxy  1     300       300        400µs      1ms        1ms        0\n" +
		"ratio lockproxy/redsync at conc 1: 1.50x\n" +
		"errors redsync conc 1: 1 x lock: boom\n"
	if sb.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", sb.String(), want)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-concurrency", "4, 8", "-impl", "lockproxy,redsync"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.conc, []int{4, 8}) || !slices.Equal(o.impls, []string{"redsync", "lockproxy"}) {
		t.Fatalf("conc %v impls %v", o.conc, o.impls)
	}
	for _, bad := range [][]string{{"-concurrency", "0"}, {"-impl", "etcd"}, {"-duration", "0s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

func TestWorkerRenamesFailedKey(t *testing.T) {
	w := &worker{keys: []string{"a", "b"}, timeout: time.Second, rec: newReservoir(4, 1), acq: newReservoir(4, 1)}
	fail := func(context.Context, string) (time.Duration, error) { return 0, errors.New("boom") }
	w.one(context.Background(), fail, 1)
	w.one(context.Background(), fail, 1)
	if w.keys[0] != "a" || w.keys[1] != "b:r2" || w.failed != 2 || len(w.rec.samples()) != 0 {
		t.Fatalf("keys %q failed %d samples %d", w.keys, w.failed, len(w.rec.samples()))
	}
}
