package instance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Node health is probed in the background so that a node that stops
// answering shows while no client is taking locks.
const (
	probeEvery = time.Second
	// probeTimeout is far above a node's usual answer, so that a loaded
	// host does not make a healthy node look down.
	probeTimeout = time.Second
	probeKey     = "lockproxy:health"
)

// watchedNode is one Redis node as the health view sees it: latency and
// errors of every call (record, the node's RedisOptions.Observe), and
// whether its last health probe answered.
type watchedNode struct {
	quorum.Node
	set *nodeSet

	index int // the node's place in the Redlock's list

	mu      sync.Mutex
	up      bool
	lastErr string
	// counted is whether the restart rule counts the node's answers
	// (quorum.Config.OnTrust), and why not.
	counted    bool
	notCounted string
}

// record counts one call's latency and, if it failed, its error's kind. A
// call cancelled because the quorum was already decided says nothing about
// the node.
func (n *watchedNode) record(d time.Duration, err error) {
	if rl := n.set.clock.Load(); rl != nil && errors.Is(err, quorum.ErrClockJumped) {
		// A jump shows in one pipeline only, perhaps in answers that come
		// after their fan-out was decided and that nobody reads. The node
		// is held out here, before the node's worker, which is delivering
		// this answer, reads its next pipeline (in step with the jumped
		// clock: no jump shows there, and its votes must not count);
		// telling the holders is done apart, as it must not wait on it.
		if tell := rl.HoldClock(n.index, err); tell != nil {
			go tell()
		}
	}
	kind := errorKind(err)
	if kind == "canceled" {
		return
	}
	n.set.latency.WithLabelValues(n.String()).Observe(d.Seconds())
	if err != nil {
		n.set.errors.WithLabelValues(n.String(), kind).Inc()
	}
}

// errorKind sorts a node's error for the errors metric: timeout,
// connection (refused, reset, closed), canceled, or reply (the node
// answered with an error).
func errorKind(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &ne), strings.Contains(err.Error(), "EOF"), strings.Contains(err.Error(), "closed"):
		return "connection"
	default:
		return "reply"
	}
}

// probe asks the node for a key's holder and notes whether it answered,
// logging when that changes.
func (n *watchedNode) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	done := make(quorum.Replies, 1)
	n.Do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: probeKey}, 0, done)
	r := <-done
	if errors.Is(r.Err, context.Canceled) {
		return // shutting down
	}
	if rl := n.set.redlock; rl != nil {
		rl.NoteClock(n.index, r.Err) // an idle node's clock is checked by its probe
	}
	if errors.Is(r.Err, quorum.ErrClockJumped) {
		r.Err = nil // it answered: up, and held out for its clock
	}
	n.setUp(r.Err)
}

// setUp records the probe's outcome and logs a transition once.
func (n *watchedNode) setUp(err error) {
	n.mu.Lock()
	was := n.up
	n.up = err == nil
	n.lastErr = ""
	if err != nil {
		n.lastErr = err.Error()
	}
	n.mu.Unlock()
	n.set.up.WithLabelValues(n.String()).Set(b2f(err == nil))
	switch {
	case was && err != nil:
		n.set.log.Warn("redis node stopped answering", zap.String("node", n.String()), zap.Error(err))
	case !was && err == nil:
		n.set.log.Warn("redis node answers again", zap.String("node", n.String()))
	}
}

// state is whether the node answered its last probe, and why not.
func (n *watchedNode) state() (bool, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.up, n.lastErr
}

// counts is whether the restart rule counts the node, and why not.
func (n *watchedNode) counts() (bool, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.counted, n.notCounted
}

// trust is quorum.Config.OnTrust: the restart rule stopped or started
// counting node i. Both are logged as warnings: a restart without fsync
// costs the quorum a node for up to redlock.max_lease_ms.
func (s *nodeSet) trust(i int, counted bool, why string) {
	n := s.nodes[i]
	n.mu.Lock()
	n.counted, n.notCounted = counted, ""
	if !counted {
		n.notCounted = why
	}
	n.mu.Unlock()
	s.counted.WithLabelValues(n.String()).Set(b2f(counted))
	switch {
	case counted:
		s.log.Warn("redis node counted again", zap.String("node", n.String()), zap.String("why", why))
	case strings.HasPrefix(why, quorum.LostClockJumped):
		s.log.Warn("redis node held out: its clock jumped; not counted toward any grant or fence", zap.String("node", n.String()), zap.String("why", why))
	case strings.HasPrefix(why, "the same Redis server as"):
		s.log.Warn("redis node not counted: another node's server under a second name", zap.String("node", n.String()), zap.String("why", why))
	default:
		s.log.Warn("redis node held out: not counted toward any grant or fence", zap.String("node", n.String()), zap.String("why", why),
			zap.String("fix", fixHeldOut))
	}
}

// repair is quorum.Config.OnRepair: a node that drifted apart under
// scripts run on every node was given the majority's state of some keys
// (or that failed), or the nodes differed on keys with no majority. Each
// is counted per key and logged.
func (s *nodeSet) repair(e quorum.RepairEvent) {
	keys := zap.Strings("keys", e.Keys)
	switch {
	case e.NoMajority:
		s.repairs.WithLabelValues("", "no_majority").Add(float64(len(e.Keys)))
		s.log.Info("redis nodes hold different states of a script's keys and no state has a majority of nodes: not repaired", keys)
	case e.Err != nil:
		s.repairs.WithLabelValues(s.nodes[e.Node].String(), "failed").Add(float64(len(e.Keys)))
		s.log.Warn("repair of a redis node that drifted apart from the majority failed", zap.String("node", s.nodes[e.Node].String()), keys, zap.Error(e.Err))
	default:
		s.repairs.WithLabelValues(s.nodes[e.Node].String(), "repaired").Add(float64(len(e.Keys)))
		s.log.Info("repaired a redis node that drifted apart: it now holds the majority's state of the keys", zap.String("node", s.nodes[e.Node].String()), keys)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// nodeSet is the redlock backend's nodes as this instance sees them.
type nodeSet struct {
	nodes   []*watchedNode
	log     *zap.Logger
	up      *prometheus.GaugeVec
	counted *prometheus.GaugeVec
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
	repairs *prometheus.CounterVec
	jumps   *prometheus.CounterVec
	stop    context.CancelFunc
	stopped chan struct{}
	// redlock is the restart rule's view of the nodes (HeldOut); set
	// before the nodes are probed or shown.
	redlock *quorum.Redlock
	// clock is redlock for the nodes' observers (record), which run from
	// the first call, before redlock is set.
	clock atomic.Pointer[quorum.Redlock]
	// ruleOff warns that the restart rule is off over nodes without
	// verified fsync ("" for none): INFO nodes and /readyz repeat it.
	ruleOff string
}

// heldOut is the restart rule's nodes not counted, by node.
func (s *nodeSet) heldOut() map[int]quorum.HeldOut {
	out := map[int]quorum.HeldOut{}
	if s.redlock == nil {
		return out
	}
	for _, h := range s.redlock.HeldOut() {
		out[h.Node] = h
	}
	return out
}

// heldOutWhy says why node i is not counted, with the time left; fallback
// when the rule has nothing to say (not yet read).
func heldOutWhy(h quorum.HeldOut, ok bool, fallback string) string {
	switch {
	case !ok:
		return fallback
	case h.AliasOf >= 0, h.Clock:
		return h.Why + fmt.Sprintf("; %v left", h.Left.Round(time.Second))
	default:
		return strings.TrimPrefix((&quorum.NotCountedError{HeldOut: h}).Error(), "not counted: ")
	}
}

// needsFix reports whether a node is held out by the restart rule for
// want of fsync (not as an alias), so that the fix applies.
func needsFix(held map[int]quorum.HeldOut) bool {
	for _, h := range held {
		if h.AliasOf < 0 && !h.Clock {
			return true
		}
	}
	return false
}

// explain completes a NOQUORUM with every node the restart rule holds
// out, how long each still is, and the fix: a fan-out stops once the
// outcome is decided, so its error names only the nodes heard from.
func (s *nodeSet) explain(err error) error {
	var nq *engine.NoQuorumError
	if !errors.As(err, &nq) {
		return err
	}
	held := s.heldOut()
	for i, n := range s.nodes {
		h, ok := held[i]
		if ok && !slices.ContainsFunc(nq.Failed, func(f string) bool { return strings.HasPrefix(f, n.String()+": ") }) {
			nq.Failed = append(nq.Failed, n.String()+": not counted: "+heldOutWhy(h, ok, ""))
		}
	}
	if needsFix(held) {
		nq.Hint = "fix: " + fixHeldOut
	}
	return err
}

// explained is an engine.Backend whose NOQUORUM errors name every node
// held out (nodeSet.explain).
type explained struct {
	engine.Backend
	nodes *nodeSet
}

func (e explained) Acquire(ctx context.Context, key string, h engine.Hold) (engine.Grant, error) {
	g, err := e.Backend.Acquire(ctx, key, h)
	return g, e.nodes.explain(err)
}

func (e explained) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	v, err := e.Backend.Extend(ctx, key, token, ttl, mode)
	return v, e.nodes.explain(err)
}

func (e explained) Release(ctx context.Context, key, token string, line []engine.Waiter, sent func()) (bool, error) {
	ok, err := e.Backend.Release(ctx, key, token, line, sent)
	return ok, e.nodes.explain(err)
}

func (e explained) Inspect(ctx context.Context, key string) (engine.Holder, bool, error) {
	h, ok, err := e.Backend.Inspect(ctx, key)
	return h, ok, e.nodes.explain(err)
}

func newNodeSet(log *zap.Logger) *nodeSet {
	return &nodeSet{
		log: log,
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "lockproxy", Name: "node_up",
			Help: "1 when the Redis node answered its last health probe (every second), else 0."}, []string{"node"}),
		counted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "lockproxy", Name: "node_counted",
			Help: "1 when the Redis node's answers count toward grants and fences; 0 while it is not counted after a restart without verified fsync (redlock.max_lease_ms)."}, []string{"node"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "lockproxy", Name: "node_request_duration_seconds",
			Help:    "Time a Redis node took to answer one operation (or to fail).",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"node"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockproxy", Name: "node_errors_total",
			Help: "Failed operations on a Redis node, by kind: timeout, connection, reply."}, []string{"node", "kind"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockproxy", Name: "node_script_repairs_total",
			Help: "Keys of scripts run on every node that a node held in another state than a majority of nodes, by outcome: " +
				"repaired (given the majority's state), failed (the repair did not apply), no_majority (node \"\": the nodes differed and no state had a majority; nothing repaired)."},
			[]string{"node", "outcome"}),
		jumps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockproxy", Name: "node_clock_jumps_total",
			Help: "Jumps of a Redis node's wall clock (forward or back, by more than the drift allowance between two replies) seen by this instance; each holds the node out."}, []string{"node"}),
	}
}

// add watches the node at addr; its Node is set once the node is built
// with Observe: record. Nodes start as up until a probe says otherwise,
// and as counted unless the restart rule is on (counted false) and has yet
// to vet them.
func (s *nodeSet) add(addr string, counted bool) *watchedNode {
	n := &watchedNode{set: s, index: len(s.nodes), up: true, counted: counted}
	if !counted {
		n.notCounted = "not yet vetted by the restart rule"
	}
	s.up.WithLabelValues(addr).Set(1)
	s.counted.WithLabelValues(addr).Set(b2f(counted))
	s.jumps.WithLabelValues(addr)
	s.nodes = append(s.nodes, n)
	return n
}

// start probes every node each probeEvery until close.
func (s *nodeSet) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.stopped = cancel, make(chan struct{})
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		for {
			s.probe(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (s *nodeSet) close() {
	s.stop()
	<-s.stopped
}

// probe probes every node at once and returns when all have answered.
func (s *nodeSet) probe(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.probe(ctx)
		}()
	}
	wg.Wait()
}

// health is how many nodes answer and count, the quorum, and a line per
// node down or not counted (the restart rule).
func (s *nodeSet) health() (up, quorum int, down []string) {
	held := s.heldOut()
	for i, n := range s.nodes {
		ok, why := n.state()
		counted, notCounted := n.counts()
		switch {
		case !ok:
			down = append(down, n.String()+": "+why)
		case !counted:
			h, isHeld := held[i]
			down = append(down, n.String()+": not counted: "+heldOutWhy(h, isHeld, notCounted))
		default:
			up++
		}
	}
	return up, len(s.nodes)/2 + 1, down
}

// info is the "# Nodes" section of INFO.
func (s *nodeSet) info() string {
	up, q, _ := s.health()
	held := s.heldOut()
	var b strings.Builder
	fmt.Fprintf(&b, "# Nodes\r\nnodes:%d\r\nnodes_up:%d\r\nquorum:%d\r\nstatus:%s\r\nnodes_held_out:%d\r\nclock_jumps:%d\r\n", len(s.nodes), up, q, s.status(), len(held), s.clockJumps())
	if needsFix(held) {
		fmt.Fprintf(&b, "held_out_fix:%s\r\n", fixHeldOut)
	}
	if s.ruleOff != "" {
		fmt.Fprintf(&b, "warning:%s\r\n", s.ruleOff)
	}
	for i, n := range s.nodes {
		ok, why := n.state()
		counted, notCounted := n.counts()
		h, isHeld := held[i]
		state := "up"
		switch {
		case !ok:
			state = "down"
		case !counted:
			state, why = "not_counted", heldOutWhy(h, isHeld, notCounted)
		}
		fmt.Fprintf(&b, "node%d:addr=%s,state=%s", i, n.String(), state)
		if state != "up" {
			fmt.Fprintf(&b, ",error=%s", strings.NewReplacer("\r", " ", "\n", " ", ",", ";").Replace(why))
		}
		if state == "not_counted" && isHeld {
			fmt.Fprintf(&b, ",held_out_ms=%d", h.Left.Milliseconds())
		}
		if c, ok := clockOf(n); ok {
			fmt.Fprintf(&b, ",clock_jumps=%d", c.Jumps)
			if c.Known {
				fmt.Fprintf(&b, ",clock_offset_ms=%d", c.Offset.Milliseconds())
			}
		}
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// status is ok, degraded (a minority of nodes down) or noquorum.
func (s *nodeSet) status() string {
	up, q, _ := s.health()
	switch {
	case up < q:
		return "noquorum"
	case up < len(s.nodes):
		return "degraded"
	default:
		return "ok"
	}
}

// collectors are the per-node series for /metrics.
func (s *nodeSet) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.up, s.counted, s.latency, s.errors, s.repairs, s.jumps, heldOutSeconds{s}, clockOffsets{s}}
}

// heldOutDesc is lockproxy_node_held_out_seconds.
var heldOutDesc = prometheus.NewDesc("lockproxy_node_held_out_seconds",
	"Seconds until the restart rule counts the Redis node again (every lease it may have held expired); 0 for a node counted. "+
		"A node not counted as another's alias reads +Inf.", []string{"node"}, nil)

// heldOutSeconds collects lockproxy_node_held_out_seconds at each scrape.
type heldOutSeconds struct{ s *nodeSet }

func (c heldOutSeconds) Describe(ch chan<- *prometheus.Desc) { ch <- heldOutDesc }

func (c heldOutSeconds) Collect(ch chan<- prometheus.Metric) {
	held := c.s.heldOut()
	for i, n := range c.s.nodes {
		v := 0.0
		if h, ok := held[i]; ok {
			v = h.Left.Seconds()
			if h.AliasOf >= 0 {
				v = math.Inf(1)
			}
		}
		ch <- prometheus.MustNewConstMetric(heldOutDesc, prometheus.GaugeValue, v, n.String())
	}
}

// advice is what /readyz adds to its line: the fix for nodes held out, and
// the warning of a restart rule turned off over nodes without fsync.
func (s *nodeSet) advice() string {
	var out string
	if needsFix(s.heldOut()) {
		out += "; fix: " + fixHeldOut
	}
	if s.ruleOff != "" {
		out += "; warning: " + s.ruleOff
	}
	return out
}
