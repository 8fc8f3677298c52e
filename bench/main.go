// Command bench measures LOCK+UNLOCK cycles through lockproxy against the
// same work done by the peers a user would otherwise pick, over the same
// servers, which it starts and stops itself, and checks the bars of issue
// 29. In one run, by default:
//
//   - redlock: three local redis-servers. Uncontended cycles at each
//     -concurrency through lockproxy, through redsync, through one plain
//     redis-server (the first node: SET key token NX PX 10000 plus a Lua
//     compare-and-delete, no HA) and through twemproxy in front of it
//     (the same cycle: what a proxy hop costs), then the contended case
//     (clients that all wait for one key; lockproxy's LOCK ... WAIT
//     against redsync's retries).
//   - zookeeper: one standalone ZooKeeper server (internal/zktest) against
//     go-zookeeper's lock recipe (zk.NewLock, Lock, Unlock).
//   - faults: lockproxy over three fresh nodes, the third healthy, paused
//     (SIGSTOP) and delayed by 150 ms, uncontended and contended.
//   - node state (bar 8): for each -state-keys count, lockproxy over three
//     fresh nodes locks that many distinct keys once each (SET NX PX
//     1000); once the leases ended, each node's keys and used_memory must
//     come back within a constant of where they started.
//   - embedded (bar 9): c=32 cycles on fresh keys on an empty embedded
//     backend, then after -embedded-keys distinct keys were locked once.
//   - rss: a fresh lockproxy subprocess's VmRSS with 10,000 idle loopback
//     connections, and another's with 100,000 held leases.
//
// For every case it prints cycles/s, acquire and cycle latency and the CPU
// per cycle of each process: lockproxy (a subprocess; with -inprocess it
// is in the bench's own CPU), twemproxy, the nodes (the redis-servers' or
// the ZooKeeper JVM's utime+stime from /proc/PID/stat) and the load
// generator (this process's rusage). It ends with one line per bar: its
// name, lockproxy's figure, the peer's, their ratio, the limit, and met or
// missed. The first line is the machine and its load average.
//
// Budget: about 5 minutes on the 2-core machine when lockproxy's fills are
// quick: 29 cases of 2.5 s (0.5 s warm-up, 2 s measured), the node-state
// runs (10,000 and 100,000 keys, each bounded by -fill-bound and then
// -state-grace), the embedded case (its fill bounded by -fill-bound), the
// RSS cases (bounded at 90 s each, about 10-30 s together), the servers'
// starts and lockproxy's build. A lockproxy whose nodes keep a key per
// locked key waits out -state-grace (30 s) twice; an embedded backend that
// slows with every key takes up to -fill-bound (2 min). -state=false and
// -embedded=false leave those cases out.
//
//	go run ./bench [-backend redlock,zookeeper] [-concurrency 1,32] [-contended 8]
//	               [-hold 0s] [-duration 2s] [-warmup 500ms] [-cycles N]
//	               [-impl redis,twemproxy,redsync,zkrecipe,lockproxy] [-faults=true] [-rss=true]
//	               [-state=true] [-state-keys 10000,100000] [-state-grace 30s]
//	               [-embedded=true] [-embedded-keys 100000] [-fill-bound 2m]
//	               [-inprocess] [-procs N] [-cpuprofile FILE]
//	go run ./bench -passthrough [-concurrency 1,32] [-twemproxy nutcracker]
//
// -docs docs/benchmarks.md writes a complete run (date, machine, load,
// every bar line, the whole output) into that page's marked block for its
// kind of run, so that the published figures are never edited by hand.
//
// -passthrough measures forwarded GET/SET instead: the data Redis
// directly, through twemproxy when it is installed, and through lockproxy,
// in one run; its bars compare lockproxy with twemproxy.
//
// With -concurrency "" -contended 0 no backend's case runs, only the
// faults, node-state, embedded and RSS cases: add -faults=false,
// -state=false or -embedded=false to leave those out.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	passthrough bool   // measure forwarded GET/SET instead
	twemproxy   string // twemproxy's executable, the reference proxy
	faults      bool
	state       bool          // bar 8's node-state case
	stateKeys   []int         // its key counts, one run each
	stateGrace  time.Duration // how long after the last lease the nodes may take to come back
	embedded    bool          // bar 9's embedded-backend case
	embKeys     int           // the distinct keys it locks between its two measures
	fillBound   time.Duration // bound of one fill of distinct keys (bars 8 and 9)
	rss         bool
	docs        string // a Markdown page whose marked block gets the run; empty: none
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
	if o.docs != "" {
		if err := checkDocs(o.docs, docsBlock(o)); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -docs:", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = measureAndWrite(ctx, o, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// measureAndWrite runs what o asks for, printing on standard output, and
// with -docs writes a complete run into the page.
func measureAndWrite(ctx context.Context, o options, args []string) error {
	var out bytes.Buffer
	w := io.Writer(os.Stdout)
	if o.docs != "" {
		w = io.MultiWriter(os.Stdout, &out)
	}
	r := docsRun{block: docsBlock(o), command: commandLine(args), started: time.Now(), machine: machineLine()}
	var err error
	if o.passthrough {
		err = runPassthrough(ctx, o, w)
	} else {
		err = run(ctx, o, w)
	}
	if err != nil || o.docs == "" {
		return err
	}
	r.took, r.output = time.Since(r.started), out.String()
	if err := writeDocs(o.docs, r); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote this run into %s\n", o.docs)
	return nil
}

func parseFlags(args []string) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	conc := fs.String("concurrency", "1,32", "uncontended concurrency levels, comma-separated (empty: none)")
	fs.IntVar(&o.contended, "contended", 8, "clients of the contended case, all on one key (0: no contended case)")
	fs.DurationVar(&o.hold, "hold", 0, "how long a contended client holds the lock (a timer: below about 1ms the OS rounds it up)")
	backends := fs.String("backend", "redlock,zookeeper",
		"backends to run, each lockproxy against its peer: redlock (redis, redsync), zookeeper (zkrecipe)")
	impls := fs.String("impl", "redis,twemproxy,redsync,zkrecipe,lockproxy",
		"implementations to run: redis (redlock: one plain redis-server, SET NX PX + Lua release), twemproxy (redlock: the same through twemproxy, left out if -twemproxy is not found), redsync (redlock), zkrecipe (zookeeper: go-zookeeper's lock recipe), lockproxy (every backend)")
	fs.DurationVar(&o.duration, "duration", 2*time.Second, "measured time per case")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up per case, before it")
	fs.Int64Var(&o.cycles, "cycles", 2_000_000, "most cycles (contended: lock attempts) per case (and per warm-up)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "bound of one LOCK+UNLOCK cycle")
	fs.IntVar(&o.samples, "samples", 1_000_000, "latency samples kept per case (reservoir beyond)")
	fs.BoolVar(&o.inprocess, "inprocess", false, "run lockproxy in this process instead of a subprocess")
	fs.IntVar(&o.procs, "procs", 0, "GOMAXPROCS of the lockproxy subprocess (0: Go's default)")
	fs.BoolVar(&o.faults, "faults", true, "after the backends, measure lockproxy (redlock) with one node healthy, paused and delayed 150ms")
	fs.BoolVar(&o.state, "state", true, "bar 8: lock -state-keys distinct keys once each (SET NX PX) through lockproxy over fresh nodes, and compare each node's keys and used_memory once the leases ended with its start")
	stateKeys := fs.String("state-keys", "10000,100000", "key counts of the node-state case, one run over fresh nodes each, comma-separated")
	fs.DurationVar(&o.stateGrace, "state-grace", 30*time.Second, "how long after the last lease ended the node-state case waits for the nodes to come back within the constant")
	fs.BoolVar(&o.embedded, "embedded", true, "bar 9: c=32 cycles/s on fresh keys on an empty embedded backend, and after -embedded-keys distinct keys were locked once")
	fs.IntVar(&o.embKeys, "embedded-keys", 100_000, "distinct keys the embedded case locks between its two measures")
	fs.DurationVar(&o.fillBound, "fill-bound", 2*time.Minute, "bound of locking the distinct keys of one node-state run or of the embedded case")
	fs.BoolVar(&o.rss, "rss", true, "measure the lockproxy subprocess's RSS with 10,000 idle connections and with 100,000 held locks")
	fs.BoolVar(&o.passthrough, "passthrough", false, "measure forwarded GET/SET through lockproxy against the data Redis directly, at each -concurrency, instead of locks")
	fs.StringVar(&o.twemproxy, "twemproxy", "nutcracker", "twemproxy's executable, measured in the same run as a reference proxy (left out if not found)")
	fs.StringVar(&o.docs, "docs", "", "after a complete run, write its date, machine, load, bar lines and output into this page's marked block (docs/benchmarks.md)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of this process to FILE (use with -inprocess)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.conc, err = parseInts(*conc); err != nil {
		return o, fmt.Errorf("-concurrency: %w", err)
	}
	if o.stateKeys, err = parseInts(*stateKeys); err != nil {
		return o, fmt.Errorf("-state-keys: %w", err)
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
	if o.embKeys <= 0 || o.fillBound <= 0 || o.stateGrace < 0 || (o.state && len(o.stateKeys) == 0) {
		return errors.New("-embedded-keys, -fill-bound and -state-keys must be positive, -state-grace not negative")
	}
	if !o.hasCases() && !o.faults && !o.rss && !o.state && !o.embedded {
		return errors.New("nothing to measure: -concurrency is empty, -contended is 0, -faults, -state, -embedded and -rss are false")
	}
	return nil
}

// hasCases reports whether the backends' cases run: with -concurrency ”
// and -contended 0 only the faults and RSS cases do (-rss alone:
// -faults=false too).
func (o options) hasCases() bool { return len(o.conc) > 0 || o.contended > 0 }

// parseInts reads "1,32" into positive ints; "" is none.
func parseInts(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
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
