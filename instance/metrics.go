package instance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// serveMetrics serves /metrics, /healthz and /readyz on the metrics
// listener, when configured.
func (in *Instance) serveMetrics() {
	ln := in.metricsLn
	if ln == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(in.registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", in.ready)
	in.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	in.metricsAddr = ln.Addr().String()
	go func() {
		if err := in.metrics.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			in.log.Error("metrics listener stopped", zap.Error(err))
		}
	}()
	in.log.Info("metrics serving", zap.String("listen", ln.Addr().String()))
}

// ready answers 503 when the backend cannot grant locks. Over redlock it
// probes every node: all answering is "ready"; a minority down is still 200
// (locks are granted) with a body starting "degraded" that names them; a
// majority down is 503 "not ready". Over zookeeper it inspects a key.
func (in *Instance) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if in.nodeSet != nil {
		in.readyNodes(ctx, w)
		return
	}
	if _, _, err := in.engine.Info(ctx, "lockproxy:readyz"); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}

// readyNodes is ready over redlock nodes.
func (in *Instance) readyNodes(ctx context.Context, w http.ResponseWriter) {
	in.nodeSet.probe(ctx)
	up, q, down := in.nodeSet.health()
	n := len(in.nodeSet.nodes)
	detail := ""
	if len(down) > 0 {
		detail = "; down: " + strings.Join(down, "; ")
	}
	switch {
	case up < q:
		http.Error(w, fmt.Sprintf("not ready: %d of %d nodes answer and count, %d needed%s%s", up, n, q, detail, in.nodeSet.advice()), http.StatusServiceUnavailable)
	case up < n:
		fmt.Fprintf(w, "degraded: %d of %d nodes answer and count, %d needed%s%s\n", up, n, q, detail, in.nodeSet.advice())
	default:
		fmt.Fprintf(w, "ready: %d of %d nodes answer%s\n", up, n, in.nodeSet.advice())
	}
}

// registry exposes the engine's and the server's counters.
func (in *Instance) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	s := in.engine.Stats()
	counter := func(name, help string, f func() int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "lockproxy", Name: name, Help: help},
			func() float64 { return float64(f()) }))
	}
	gauge := func(name, help string, f func() int64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "lockproxy", Name: name, Help: help},
			func() float64 { return float64(f()) }))
	}
	counter("locks_granted_total", "Locks granted.", s.Grants.Load)
	counter("locks_released_total", "Locks released by their holder or on disconnect.", s.Releases.Load)
	counter("renewals_total", "Successful watchdog renewals of connection-bound locks.", s.Renewals.Load)
	counter("renewal_failures_total", "Watchdog renewals that failed.", s.RenewFailures.Load)
	counter("locks_lost_total", "Locks lost or taken from their holder (renewal failed, session expired, DEL from another connection).", s.Lost.Load)
	gauge("bound_locks", "Connection-bound locks this instance keeps alive.", func() int64 { return int64(in.engine.BoundHeld()) })
	gauge("clients", "Open client connections.", func() int64 { return int64(in.resp.Clients()) })
	counter("auth_failures_total", "Wrong passwords sent by clients (AUTH, HELLO AUTH).", in.resp.AuthFailures)
	reg.MustRegister(in.lockCollectors()...)
	if in.nodeSet != nil {
		reg.MustRegister(in.nodeSet.collectors()...)
	}
	if in.router != nil {
		passthroughMetrics(reg, in.router)
	}
	reg.MustRegister(prometheus.NewGoCollector())
	return reg
}

// MetricsAddr is the metrics listener's address ("" when off).
func (in *Instance) MetricsAddr() string { return in.metricsAddr }
