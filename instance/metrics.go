package instance

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// startMetrics serves /metrics, /healthz and /readyz when configured.
func (in *Instance) startMetrics() error {
	if in.cfg.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", in.cfg.MetricsListen)
	if err != nil {
		return err
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
	return nil
}

// ready answers 200 when the backend answers a lock inspection.
func (in *Instance) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, _, err := in.engine.Info(ctx, "lockproxy:readyz"); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
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
	counter("locks_lost_total", "Connection-bound locks lost while their holder was connected.", s.Lost.Load)
	gauge("bound_locks", "Connection-bound locks this instance keeps alive.", func() int64 { return int64(in.engine.BoundHeld()) })
	gauge("clients", "Open client connections.", func() int64 { return int64(in.resp.Clients()) })
	if in.router != nil {
		passthroughMetrics(reg, in.router)
	}
	reg.MustRegister(prometheus.NewGoCollector())
	return reg
}

// MetricsAddr is the metrics listener's address ("" when off).
func (in *Instance) MetricsAddr() string { return in.metricsAddr }
