// Command bench measures uncontended LOCK+UNLOCK cycles through lockproxy
// against the same work done client-side by a peer over the same servers,
// which it starts and stops itself, then the contended case: clients that
// all wait for one key, with lockproxy's LOCK ... WAIT against the peer's own
// way of waiting. One section per backend:
//
//   - redlock: three local redis-servers; the peer is redsync, which waits
//     with its default retries.
//   - zookeeper: one standalone ZooKeeper server (internal/zktest); the peer
//     is go-zookeeper's lock recipe (zk.NewLock, Lock, Unlock), whose
//     waiters watch their predecessor.
//
// By default both run: 12 cases of 6 s (1 s warm-up, 5 s measured) plus the
// servers' start: about 75 s on a 2-core machine.
//
//	go run ./bench [-backend redlock,zookeeper] [-concurrency 1,32] [-contended 8]
//	               [-hold 0s] [-duration 5s] [-warmup 1s] [-cycles N]
//	               [-impl redsync,zkrecipe,lockproxy] [-faults] [-inprocess] [-procs N] [-cpuprofile FILE]
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
	suites      []suite // the backends to run, each with at least one impl
	conc        []int   // uncontended concurrency levels; none if empty
	contended   int     // clients of the contended case; 0: no contended case
	hold        time.Duration
	impls       []string
	duration    time.Duration
	warmup      time.Duration
	cycles      int64
	timeout     time.Duration
	samples     int
	inprocess   bool
	procs       int
	cpuprofile  string
	passthrough bool // measure forwarded GET/SET instead (issue 14)
	faults      bool
	rss         bool
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
	if o.passthrough {
		err = runPassthrough(ctx, o, os.Stdout)
	} else {
		err = run(ctx, o, os.Stdout)
	}
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
	backends := fs.String("backend", "redlock,zookeeper",
		"backends to run, each lockproxy against its peer: redlock (redsync), zookeeper (zkrecipe); the default, both, takes about 75 s")
	impls := fs.String("impl", "redis,redsync,zkrecipe,lockproxy",
		"implementations to run: redis (redlock: one plain redis-server, SET NX PX + Lua release), redsync (redlock), zkrecipe (zookeeper: go-zookeeper's lock recipe), lockproxy (every backend)")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time per case")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up per case, before it")
	fs.Int64Var(&o.cycles, "cycles", 2_000_000, "most cycles (contended: lock attempts) per case (and per warm-up)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "bound of one LOCK+UNLOCK cycle")
	fs.IntVar(&o.samples, "samples", 1_000_000, "latency samples kept per case (reservoir beyond)")
	fs.BoolVar(&o.inprocess, "inprocess", false, "run lockproxy in this process instead of a subprocess")
	fs.IntVar(&o.procs, "procs", 0, "GOMAXPROCS of the lockproxy subprocess (0: Go's default)")
	fs.BoolVar(&o.faults, "faults", true, "after the backends, measure lockproxy (redlock) with one node healthy, paused and delayed 150ms")
	fs.BoolVar(&o.rss, "rss", true, "measure the lockproxy subprocess's RSS with 10,000 idle connections and with 100,000 held locks")
	fs.BoolVar(&o.passthrough, "passthrough", false, "measure forwarded GET/SET through lockproxy against the data Redis directly, at each -concurrency, instead of locks")
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
	if o.suites, err = pickSuites(*backends, o.impls); err != nil {
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
	return parseNames("-impl", s, allImpls)
}

// parseNames reads a comma-separated subset of all, in all's order.
func parseNames(flagName, s string, all []string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(all, f) {
			return nil, fmt.Errorf("%s: %q, want one of %s", flagName, f, strings.Join(all, ", "))
		}
		out = append(out, f)
	}
	return slices.DeleteFunc(slices.Clone(all), func(n string) bool { return !slices.Contains(out, n) }), nil
}

// pickSuites are the backends named in s that run at least one of impls:
// lockproxy or the backend's peer. A backend with none is left out, so
// that -impl redsync runs the redlock section only.
func pickSuites(s string, impls []string) ([]suite, error) {
	names, err := parseNames("-backend", s, allBackends())
	if err != nil {
		return nil, err
	}
	var out []suite
	for _, st := range suites {
		if slices.Contains(names, st.backend) && slices.ContainsFunc(st.order(), func(i string) bool { return slices.Contains(impls, i) }) {
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nothing to run: -impl %s runs none of -backend %s", strings.Join(impls, ","), strings.Join(names, ","))
	}
	return out, nil
}

// runs reports whether impl runs in suite s.
func (o options) runs(s suite, impl string) bool {
	return slices.Contains(o.impls, impl) && slices.Contains(s.order(), impl)
}
