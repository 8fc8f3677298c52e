package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// keysPerWorker is how many keys each worker cycles through. A small ring,
// not one key per cycle: lockproxy keeps a fencing counter per key forever.
const keysPerWorker = 16

// spec is one measured phase: concurrency and its bounds.
type spec struct {
	conc     int
	duration time.Duration // wall-clock bound of the phase
	cycles   int64         // most cycles in the phase, over all workers
	timeout  time.Duration // bound of one LOCK+UNLOCK cycle
	samples  int           // latency samples kept, over all workers
	phase    string        // "warmup" or "run"; part of the keys
	fresh    bool          // every cycle on a key never used before, instead of the ring
}

// outcome is what one phase measured.
type outcome struct {
	impl    string
	conc    int
	cycles  int64           // successful cycles
	errors  int64           // failed cycles
	elapsed time.Duration   // wall time of the phase
	lat     []time.Duration // cycle latencies, sorted
	acq     []time.Duration // acquire latencies of the same cycles, sorted
	errs    errorLog
	cost    costs // spent during the phase
}

// rate is successful cycles per second.
func (o outcome) rate() float64 {
	if o.elapsed <= 0 {
		return 0
	}
	return float64(o.cycles) / o.elapsed.Seconds()
}

// worker runs cycles on its own keys and records them.
type worker struct {
	keys    []string // the current name of each key slot
	renamed int      // key slots renamed after a failure so far
	fresh   string   // with spec.fresh: the prefix of this worker's keys, each cycle's its own
	timeout time.Duration
	rec     *reservoir // cycle latencies
	acq     *reservoir // acquire latencies, sampled alike
	ok      int64
	failed  int64
	errs    errorLog
}

// measure runs t at s.conc workers until s.duration passed, s.cycles were
// started, or ctx ends, whichever comes first.
func measure(ctx context.Context, t *target, s spec) outcome {
	runtime.GC() // start every phase with the same heap debt
	workers := newWorkers(t.name, s)
	var budget atomic.Int64
	budget.Store(s.cycles)
	deadline := time.Now().Add(s.duration)
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.loop(ctx, t.cycle, &budget, deadline) })
	}
	wg.Wait()
	return collect(t.name, s.conc, time.Since(start), workers)
}

func newWorkers(impl string, s spec) []*worker {
	workers := make([]*worker, s.conc)
	per := max(s.samples/s.conc, 1)
	for i := range workers {
		workers[i] = &worker{keys: workerKeys(impl, s, i), timeout: s.timeout,
			rec: newReservoir(per, uint64(i)), acq: newReservoir(per, uint64(i))}
		if s.fresh {
			workers[i].fresh = fmt.Sprintf("bench:%s:%s:c%d:w%d:fresh", impl, s.phase, s.conc, i)
		}
	}
	return workers
}

// workerKeys are worker i's own keys, unique to the impl, the concurrency and
// the phase, so a lock left behind by a failed cycle never blocks another.
func workerKeys(impl string, s spec, i int) []string {
	keys := make([]string, keysPerWorker)
	for k := range keys {
		keys[k] = fmt.Sprintf("bench:%s:%s:c%d:w%d:k%d", impl, s.phase, s.conc, i, k)
	}
	return keys
}

// loop runs cycles while the shared budget lasts, the deadline has not
// passed and ctx is live.
func (w *worker) loop(ctx context.Context, cycle cycleFunc, budget *atomic.Int64, deadline time.Time) {
	for i := 0; budget.Add(-1) >= 0 && ctx.Err() == nil && time.Now().Before(deadline); i++ {
		if w.fresh != "" {
			w.keys[0] = w.fresh + strconv.Itoa(i)
			w.one(ctx, cycle, 0)
			continue
		}
		w.one(ctx, cycle, i%len(w.keys))
	}
}

// one runs and records a single cycle on key slot k; only successful
// cycles are timed. After a failure the slot gets a new key, as the lock may
// still be held until its lease expires.
func (w *worker) one(ctx context.Context, cycle cycleFunc, k int) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	start := time.Now()
	acquire, err := cycle(ctx, w.keys[k])
	d := time.Since(start)
	if err != nil {
		w.failed++
		w.errs.add(err)
		w.rename(k)
		return
	}
	w.ok++
	w.rec.add(d)
	w.acq.add(acquire)
}

// rename gives key slot k a name no cycle has used.
func (w *worker) rename(k int) {
	w.renamed++
	base, _, _ := strings.Cut(w.keys[k], ":r")
	w.keys[k] = base + ":r" + strconv.Itoa(w.renamed)
}

// collect merges the workers' counts, errors and samples.
func collect(impl string, conc int, elapsed time.Duration, workers []*worker) outcome {
	o := outcome{impl: impl, conc: conc, elapsed: elapsed}
	for _, w := range workers {
		o.cycles += w.ok
		o.errors += w.failed
		o.errs.merge(w.errs)
		o.lat = append(o.lat, w.rec.samples()...)
		o.acq = append(o.acq, w.acq.samples()...)
	}
	sortDurations(o.lat)
	sortDurations(o.acq)
	return o
}
