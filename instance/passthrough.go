package instance

import (
	"fmt"

	"github.com/lockproxy/lockproxy/passthrough"
	"github.com/lockproxy/lockproxy/resp"
	"github.com/prometheus/client_golang/prometheus"
)

// PassthroughConfig names the data Redis that non-lock commands go to.
type PassthroughConfig struct {
	Address   string   `toml:"address"`    // host:port of the data Redis; empty: no passthrough
	Username  string   `toml:"username"`   // its ACL user; empty: default
	Password  string   `toml:"password"`   // its AUTH password
	DB        int      `toml:"db"`         // database each upstream connection selects
	TimeoutMS int      `toml:"timeout_ms"` // bound of a dial and of each non-blocking command
	LockKeys  []string `toml:"lock_keys"`  // glob patterns of lock keys; empty: lock-shaped commands are locks
	TLS       NodeTLS  `toml:"tls"`        // TLS to the data Redis
}

func (p PassthroughConfig) validate() error {
	if p.Address == "" {
		return nil
	}
	if p.DB < 0 {
		return fmt.Errorf("passthrough.db must be 0 or more, not %d", p.DB)
	}
	for _, k := range p.LockKeys {
		if k == "" {
			return fmt.Errorf("passthrough.lock_keys: an empty pattern matches no key")
		}
	}
	if t := p.TLS; (t.CertFile == "") != (t.KeyFile == "") {
		return fmt.Errorf("passthrough.tls.cert_file and passthrough.tls.key_file go together")
	}
	return nil
}

// newRouter is the passthrough router, nil without a data Redis.
func (in *Instance) newRouter() (*passthrough.Router, error) {
	p := in.cfg.Passthrough
	if p.Address == "" {
		return nil, nil
	}
	cfg := passthrough.Config{
		Addr: p.Address, Username: p.Username, Password: p.Password, DB: p.DB,
		LockKeys: p.LockKeys, Timeout: ms(p.TimeoutMS),
	}
	if p.TLS.Enabled {
		// Its files join the others Reload re-reads (SIGHUP): connections
		// dialled after a reload verify against, and present, the new ones.
		d, err := in.dialTLS(p.TLS)
		if err != nil {
			return nil, fmt.Errorf("passthrough.tls: %w", err)
		}
		cfg.TLS = hostTLS(d, p.Address)
	}
	return passthrough.New(cfg), nil
}

// withInfo adds the passthrough section to the session's INFO.
type withInfo struct {
	resp.Session
	router *passthrough.Router
}

func (w withInfo) Info(section string) string {
	return w.Session.Info(section) + w.router.Info(section)
}

// passthroughMetrics registers the forwarding counters.
func passthroughMetrics(reg *prometheus.Registry, r *passthrough.Router) {
	s := r.Stats()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "lockproxy", Name: "forwarded_commands_total",
		Help: "Commands forwarded to the data Redis."}, func() float64 { return float64(s.Forwarded.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "lockproxy", Name: "forward_failures_total",
		Help: "Forwarded commands that got no reply: the data Redis could not be reached or broke off."},
		func() float64 { return float64(s.Failed.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "lockproxy", Name: "passthrough_state_lost_total",
		Help: "Clients closed because their connection state on the data Redis (MULTI, WATCH, SELECT, CLIENT settings) was lost with their connection there."},
		func() float64 { return float64(s.StateLost.Load()) }))
}
