// Command bench measures uncontended LOCK+UNLOCK cycles through lockproxy
// (redlock backend) against the same work done client-side by redsync, over
// the same three local redis-servers, which it starts and stops itself. Then
// it measures the contended case: clients that all wait for one key, with
// lockproxy's LOCK ... WAIT against redsync's default retries.
//
//	go run ./bench [-concurrency 1,32] [-contended 8] [-hold 0s] [-duration 5s]
//	               [-warmup 1s] [-cycles N] [-impl redsync,lockproxy]
//	               [-inprocess] [-cpuprofile FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command line.
type options struct {
	conc       []int // uncontended concurrency levels; none if empty
	contended  int   // clients of the contended case; 0: no contended case
	hold       time.Duration
	impls      []string
	duration   time.Duration
	warmup     time.Duration
	cycles     int64
	timeout    time.Duration
	samples    int
	inprocess  bool
	cpuprofile string
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	conc := fs.String("concurrency", "1,32", "uncontended concurrency levels, comma-separated (empty: none)")
	fs.IntVar(&o.contended, "contended", 8, "clients of the contended case, all on one key (0: no contended case)")
	fs.DurationVar(&o.hold, "hold", 0, "how long a contended client holds the lock (a timer: below about 1ms the OS rounds it up)")
	impls := fs.String("impl", "redsync,lockproxy", "implementations to run: redsync, lockproxy")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per case")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up per case, before it")
	fs.Int64Var(&o.cycles, "cycles", 2_000_000, "most cycles (contended: lock attempts) per case (and per warm-up)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "bound of one LOCK+UNLOCK cycle")
	fs.IntVar(&o.samples, "samples", 1_000_000, "latency samples kept per case (reservoir beyond)")
	fs.BoolVar(&o.inprocess, "inprocess", false, "run lockproxy in this process instead of a subprocess")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of this process to FILE (use with -inprocess)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.conc, err = parseInts(*conc); err != nil {
		return o, err
	}
	if o.impls, err = parseImpls(*impls); err != nil {
		return o, err
	}
	return o, o.validate()
}

func (o options) validate() error {
	if o.duration <= 0 || o.warmup < 0 || o.cycles <= 0 || o.timeout <= 0 || o.samples <= 0 {
		return errors.New("-duration, -cycles, -timeout and -samples must be positive, -warmup not negative")
	}
	if o.contended < 0 || o.hold < 0 {
		return errors.New("-contended and -hold must not be negative")
	}
	if len(o.conc) == 0 && o.contended == 0 {
		return errors.New("nothing to measure: -concurrency is empty and -contended is 0")
	}
	return nil
}

// parseInts reads "1,32" into positive ints; "" is none.
func parseInts(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-concurrency: %q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseImpls reads "redsync,lockproxy" and keeps the canonical order.
func parseImpls(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allImpls, f) {
			return nil, fmt.Errorf("-impl: %q, want redsync or lockproxy", f)
		}
		out = append(out, f)
	}
	return slices.DeleteFunc(slices.Clone(allImpls), func(n string) bool { return !slices.Contains(out, n) }), nil
}

// allImpls are the implementations, in the table's order.
var allImpls = []string{"redsync", "lockproxy"}
