package instance

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/prometheus/client_golang/prometheus"
)

// lockMetrics records, in one place, what the backend answered the engine:
// the latency of every acquire, extend and release by outcome, and the
// locks this instance granted that are still held. It sits between the
// engine and the backend, so a LOCK ... WAIT counts one acquire per try.
type lockMetrics struct {
	latency  *prometheus.HistogramVec // op, outcome
	failures *prometheus.CounterVec   // op, outcome: every outcome but success
	held     heldLocks
}

func newLockMetrics() *lockMetrics {
	return &lockMetrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "lockproxy", Name: "backend_op_duration_seconds",
			Help: "Time the lock backend took for one acquire, extend or release, by outcome: granted, refused, " +
				"released, notheld, noquorum, unavailable, timeout, canceled, error.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"op", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockproxy", Name: "backend_failures_total",
			Help: "Backend calls that did not succeed, by op and outcome: refused (another holder), notheld, " +
				"noquorum (NOQUORUM), unavailable (UNAVAILABLE), timeout, canceled, error."}, []string{"op", "outcome"}),
	}
}

// observe records one backend call of op that started at start.
func (m *lockMetrics) observe(op string, start time.Time, err error, success string) {
	o := outcome(err, success)
	m.latency.WithLabelValues(op, o).Observe(time.Since(start).Seconds())
	if err != nil {
		m.failures.WithLabelValues(op, o).Inc()
	}
}

// outcome names err for the metrics; success names a nil error.
func outcome(err error, success string) string {
	switch {
	case err == nil:
		return success
	case errors.Is(err, engine.ErrNotAcquired):
		return "refused"
	case errors.Is(err, engine.ErrNotHeld), errors.Is(err, engine.ErrNotBound):
		return "notheld"
	case errors.Is(err, engine.ErrNoQuorum):
		return "noquorum"
	case errors.Is(err, engine.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "error"
	}
}

// counted is an engine.Backend whose calls lockMetrics records.
type counted struct {
	engine.Backend
	m *lockMetrics
}

// countBackend wraps b.
func countBackend(b engine.Backend, m *lockMetrics) engine.Backend {
	return &counted{Backend: b, m: m}
}

func (c *counted) Acquire(ctx context.Context, key string, h engine.Hold) (engine.Grant, error) {
	start := time.Now()
	g, err := c.Backend.Acquire(ctx, key, h)
	c.m.observe("acquire", start, err, "granted")
	if err == nil {
		c.m.held.add(key, h, g.Validity)
	}
	return g, err
}

func (c *counted) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	start := time.Now()
	v, err := c.Backend.Extend(ctx, key, token, ttl, mode)
	c.m.observe("extend", start, err, "extended")
	switch {
	case err == nil:
		c.m.held.extend(key, token, v, mode)
	case errors.Is(err, engine.ErrNotHeld):
		c.m.held.remove(key, token)
	}
	return v, err
}

func (c *counted) Release(ctx context.Context, key, token string, line []engine.Waiter, sent func()) (bool, error) {
	start := time.Now()
	ok, err := c.Backend.Release(ctx, key, token, line, sent)
	c.released(start, key, token, ok, err)
	return ok, err
}

func (c *counted) released(start time.Time, key, token string, ok bool, err error) {
	if err == nil && !ok {
		err = engine.ErrNotHeld
	}
	c.m.observe("release", start, err, "released")
	if err == nil || errors.Is(err, engine.ErrNotHeld) {
		c.m.held.remove(key, token)
	}
}

// heldLocks are the locks this instance granted whose validity has not
// run out, as far as it knows (another instance may release a lease).
type heldLocks struct {
	mu        sync.Mutex
	locks     map[string]heldLock // by key
	nextPrune int
}

type heldLock struct {
	token string
	mode  engine.Mode
	until time.Time
}

func (h *heldLocks) add(key string, hold engine.Hold, validity time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.locks == nil {
		h.locks = map[string]heldLock{}
	}
	h.locks[key] = heldLock{token: hold.Token, mode: hold.Mode, until: time.Now().Add(validity)}
	if len(h.locks) >= h.nextPrune { // amortized: the map stays at most twice the live locks
		h.pruneLocked(time.Now())
		h.nextPrune = max(1024, 2*len(h.locks))
	}
}

func (h *heldLocks) extend(key, token string, validity time.Duration, mode engine.Mode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.locks[key]; ok && l.token == token {
		l.until = time.Now().Add(validity)
		if mode != "" {
			l.mode = mode
		}
		h.locks[key] = l
	}
}

func (h *heldLocks) remove(key, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.locks[key]; ok && l.token == token {
		delete(h.locks, key)
	}
}

func (h *heldLocks) pruneLocked(now time.Time) {
	for k, l := range h.locks {
		if now.After(l.until) {
			delete(h.locks, k)
		}
	}
}

// count is the locks still valid in mode.
func (h *heldLocks) count(mode engine.Mode) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(time.Now())
	n := 0
	for _, l := range h.locks {
		if l.mode == mode {
			n++
		}
	}
	return n
}

// collectors are the lock-level series for /metrics: the backend
// latencies, the locks held and waiters, and the build.
func (in *Instance) lockCollectors() []prometheus.Collector {
	held := prometheus.NewDesc("lockproxy_held_locks", "Locks granted by this instance whose validity has not run out, by mode.", []string{"mode"}, nil)
	waiters := prometheus.NewDesc("lockproxy_waiters", "Clients of this instance waiting for a lock (LOCK ... WAIT, BLOCK).", nil, nil)
	build := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "lockproxy", Name: "build_info",
		Help:        "Always 1; the labels say what runs.",
		ConstLabels: prometheus.Labels{"version": Version, "goversion": runtime.Version(), "backend": in.cfg.BackendName()}})
	build.Set(1)
	return []prometheus.Collector{in.lockMetrics.latency, in.lockMetrics.failures, build, collectorFunc{
		descs: []*prometheus.Desc{held, waiters},
		collect: func(ch chan<- prometheus.Metric) {
			for _, mode := range []engine.Mode{engine.Bound, engine.Lease} {
				ch <- prometheus.MustNewConstMetric(held, prometheus.GaugeValue, float64(in.lockMetrics.held.count(mode)), string(mode))
			}
			ch <- prometheus.MustNewConstMetric(waiters, prometheus.GaugeValue, float64(in.engine.Waiters("")))
		},
	}}
}

// collectorFunc is a prometheus.Collector of fixed descriptions.
type collectorFunc struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
