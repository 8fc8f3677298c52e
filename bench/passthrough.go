package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/proctest"
)

// runPassthrough measures forwarded GET/SET (issue 14): the same load on
// the data Redis directly and through a lockproxy forwarding to it (a
// subprocess, or with -inprocess in this process), at each concurrency, in
// one run. Each client alternates SET and GET on its own key; a case stops
// after o.duration or o.cycles commands. The time of a case is cut into
// ptSlices slices, direct and lockproxy taking turns, so that a change of
// the machine's load during the run weighs on both alike.
func runPassthrough(ctx context.Context, o options, w io.Writer) error {
	dir, err := os.MkdirTemp("", "bench-passthrough-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	writeMachine(w)
	if o.cpuprofile != "" && !o.inprocess {
		fmt.Fprintln(os.Stderr, "bench: -cpuprofile without -inprocess profiles the load generator only, not lockproxy")
	}
	stopProfile, err := startProfile(o.cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	data, err := startNode(filepath.Join(dir, "data"))
	if err != nil {
		return err
	}
	defer data.Stop()
	nodes, err := startCluster(dir, 3)
	if err != nil {
		return err
	}
	defer nodes.stop()
	px, err := startPassthroughProxy(ctx, o, dir, data.Addr(), nodes.addrs())
	if err != nil {
		return err
	}
	defer func() { _ = px.stop() }()
	targets := []ptTarget{{name: "direct", addr: data.Addr()}}
	tw := -1 // twemproxy's index in targets
	twp, why, err := startTwemproxy(ctx, o.twemproxy, dir, data.Addr())
	if err != nil {
		return err
	}
	if twp != nil {
		defer func() { _ = twp.stop() }()
		tw = len(targets)
		targets = append(targets, ptTarget{name: "twemproxy", addr: twp.addr, pid: twp.pid, options: twemproxyOptions})
		why = "twemproxy " + twp.desc
	}
	lp := len(targets)
	targets = append(targets, ptTarget{name: "lockproxy", addr: px.addr, pid: px.pid})
	byConc := map[int][]ptOutcome{}
	fmt.Fprintf(w, "passthrough: GET/SET alternating, warm-up %v, then %v or %d commands per case in %d turns; lockproxy %s; %s\n", o.warmup, o.duration, o.cycles, ptSlices, px.desc, why)
	fmt.Fprintf(w, "(cpu/op: CPU time per command of this process (the load generator, and lockproxy if in-process), of the proxy's subprocess, of the data redis-server)\n")
	fmt.Fprintf(w, "%-6s %-10s %12s %10s %10s %8s %10s %10s %10s\n", "conc", "target", "ops/s", "p50", "p99", "errors", "bench/op", "proxy/op", "redis/op")
	for _, conc := range o.conc {
		if ctx.Err() != nil {
			break
		}
		out := passthroughCase(ctx, targets, data.PID(), conc, o)
		byConc[conc] = out
		for i, t := range targets {
			r := out[i]
			fmt.Fprintf(w, "%-6d %-10s %12.0f %10v %10v %8d %10v %10v %10v\n", conc, t.name, r.rate, r.p50, r.p99, r.errors, r.cpu, r.proxyCPU, r.redisCPU)
		}
		direct, proxied := out[0], out[lp]
		if direct.rate > 0 {
			own := proxied.proxyCPU
			if px.pid == 0 { // in-process: the load generator does the same work in both cases
				own = proxied.cpu - direct.cpu
			}
			fmt.Fprintf(w, "%-6d ratio      %11.2fx   lockproxy / direct; lockproxy's own CPU per forwarded command: about %v\n", conc, proxied.rate/direct.rate, own)
			if tw >= 0 {
				ref := out[tw]
				fmt.Fprintf(w, "%-6d ratio      %11.2fx   twemproxy / direct; lockproxy / twemproxy %.2fx\n", conc, ref.rate/direct.rate, proxied.rate/ref.rate)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "bars (issue 29; lockproxy against twemproxy in this run):")
	for _, b := range ptBars(byConc, lp, tw, o.inprocess) {
		fmt.Fprintln(w, b)
	}
	return ctx.Err()
}

// startPassthroughProxy runs lockproxy with the redlock backend on nodes,
// forwarding to the data Redis at data.
func startPassthroughProxy(ctx context.Context, o options, dir, data string, nodes []string) (*proxy, error) {
	if o.inprocess {
		cfg := instance.Default()
		cfg.Listen, cfg.Backend, cfg.Redlock.Nodes = "127.0.0.1:0", "redlock", nodes
		cfg.Passthrough.Address = data
		cfg.Redlock.MaxLeaseMS = int(maxLease.Milliseconds())
		in, err := instance.Start(cfg, zap.NewNop())
		if err != nil {
			return nil, err
		}
		stop := func() error {
			sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			return in.Shutdown(sctx)
		}
		return &proxy{addr: in.Addr(), desc: "in-process", stop: stop}, nil
	}
	bin, err := proctest.BuildLockproxy(ctx, dir)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "lockproxy.toml")
	toml := fmt.Sprintf("[redlock]\nmax_lease_ms = %d\n[passthrough]\naddress = %q\n", maxLease.Milliseconds(), data)
	if err := os.WriteFile(conf, []byte(toml), 0o644); err != nil {
		return nil, err
	}
	args := []string{"--backend", "redlock", "--nodes", strings.Join(nodes, ","), "--config", conf}
	return startSubprocess(ctx, bin, args, o.procs)
}

type ptOutcome struct {
	rate                    float64
	p50, p99                time.Duration
	errors                  int64
	cpu, proxyCPU, redisCPU time.Duration // per command: this process's, lockproxy subprocess's, the data redis-server's
}

// ptSlices is how many turns each target takes in a case.
const ptSlices = 4

// ptTarget is one server the load runs against.
type ptTarget struct {
	name string
	addr string
	pid  int // the proxy's process, whose CPU is counted; 0: none, or in this process
	// options are its clients'; nil: ptOptions.
	options func(addr string, conc int) *redis.Options
}

// passthroughCase warms up every target, then measures conc clients on
// each in turns; the outcomes are in the order of targets. redisPID is the
// data redis-server's.
func passthroughCase(ctx context.Context, targets []ptTarget, redisPID, conc int, o options) []ptOutcome {
	clients := make([]*redis.Client, len(targets))
	for i, t := range targets {
		options := t.options
		if options == nil {
			options = ptOptions
		}
		clients[i] = redis.NewClient(options(t.addr, conc))
		defer clients[i].Close()
		if o.warmup > 0 {
			ptLoad(ctx, clients[i], conc, o.warmup, o.cycles)
		}
	}
	runs := make([]ptRun, len(targets))
	for range ptSlices {
		for i, c := range clients {
			cpu0, pcpu0, rcpu0 := selfCPU(), procCPU(targets[i].pid), procCPU(redisPID)
			r := ptLoad(ctx, c, conc, o.duration/ptSlices, o.cycles/ptSlices)
			runs[i].cpu += selfCPU() - cpu0
			runs[i].proxyCPU += procCPU(targets[i].pid) - pcpu0
			runs[i].redisCPU += procCPU(redisPID) - rcpu0
			runs[i].lat = append(runs[i].lat, r.lat...)
			runs[i].errors += r.errors
			runs[i].elapsed += r.elapsed
		}
	}
	out := make([]ptOutcome, len(runs))
	for i, r := range runs {
		out[i] = r.outcome()
	}
	return out
}

// ptOptions is the load's client for every target: RESP2 and no CLIENT
// SETINFO on connect, which twemproxy does not know (it closes the
// connection); see also twemproxyOptions. GET's and SET's replies are the
// same in RESP2 and RESP3.
func ptOptions(addr string, conc int) *redis.Options {
	return &redis.Options{Addr: addr, PoolSize: conc, MaxRetries: -1, Protocol: 2, DisableIdentity: true}
}

// ptRun is what one or more turns measured.
type ptRun struct {
	lat                     []time.Duration
	errors                  int64
	elapsed                 time.Duration
	cpu, proxyCPU, redisCPU time.Duration // in total
}

func (r ptRun) outcome() ptOutcome {
	sortDurations(r.lat)
	o := ptOutcome{rate: float64(len(r.lat)) / r.elapsed.Seconds(), p50: percentile(r.lat, 0.5), p99: percentile(r.lat, 0.99), errors: r.errors}
	if n := time.Duration(len(r.lat)); n > 0 {
		o.cpu, o.proxyCPU, o.redisCPU = r.cpu/n, r.proxyCPU/n, r.redisCPU/n
	}
	return o
}

// ptLoad runs conc clients for d or until budget commands have run.
func ptLoad(ctx context.Context, c *redis.Client, conc int, d time.Duration, budget int64) ptRun {
	var mu sync.Mutex
	var lat []time.Duration
	var errs int64
	var count sync.WaitGroup
	perClient := budget / int64(conc)
	start := time.Now()
	deadline := start.Add(d)
	for i := 0; i < conc; i++ {
		count.Add(1)
		go func(i int) {
			defer count.Done()
			key := "bench:pt:" + strconv.Itoa(i)
			var mine []time.Duration
			var bad int64
			for n := int64(0); n < perClient && time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				t0 := time.Now()
				var err error
				if n%2 == 0 {
					err = c.Set(ctx, key, "value", 0).Err()
				} else {
					err = c.Get(ctx, key).Err()
				}
				if err != nil && !errors.Is(err, redis.Nil) {
					if bad == 0 {
						fmt.Fprintln(os.Stderr, "passthrough bench:", err)
					}
					bad++
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat, errs = append(lat, mine...), errs+bad
			mu.Unlock()
		}(i)
	}
	count.Wait()
	return ptRun{lat: lat, errors: errs, elapsed: time.Since(start)}
}
