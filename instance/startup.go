package instance

import (
	"net"

	"github.com/lockproxy/lockproxy/resp"
	"go.uber.org/zap"
)

// secrets are the passwords in use, read from their files if so configured.
type secrets struct {
	clients string // what clients give with AUTH
	users   []resp.User
	nodes   string // what lockproxy gives the Redis nodes
}

// prepare reads what Start needs from files (passwords, certificates) and
// logs the configuration's warnings.
func (in *Instance) prepare() (err error) {
	if in.secrets.clients, err = in.cfg.clientPassword(); err != nil {
		return err
	}
	if in.secrets.users, err = in.cfg.users(); err != nil {
		return err
	}
	if in.secrets.nodes, err = in.cfg.nodePassword(); err != nil {
		return err
	}
	if in.listenTLS, err = in.listenerTLS(); err != nil {
		return err
	}
	if in.nodesTLS, err = in.dialTLS(in.cfg.Redlock.TLS); err != nil {
		return err
	}
	if in.zkTLS, err = in.dialTLS(in.cfg.ZooKeeper.TLS); err != nil {
		return err
	}
	for _, w := range in.cfg.Warnings() {
		in.log.Warn(w)
	}
	return nil
}

// logServing says what this instance is: version, listener, backend and
// its nodes, and how clients are let in.
func (in *Instance) logServing() {
	in.log.Info("lockproxy serving",
		zap.String("version", Version),
		zap.String("listen", in.Addr()),
		zap.Bool("tls", in.listenTLS != nil),
		zap.Bool("password", in.secrets.clients != ""),
		zap.String("backend", in.cfg.BackendName()),
		zap.Strings("nodes", in.backendAddr),
		zap.Bool("nodes_tls", in.nodesTLS != nil && in.cfg.BackendName() == "redlock" ||
			in.zkTLS != nil && in.cfg.BackendName() == "zookeeper"),
		zap.String("metrics_listen", in.metricsAddr))
	if in.secrets.clients != "" || IsLoopbackListen(in.cfg.Listen) {
		return
	}
	if in.cfg.ProtectedMode {
		in.log.Warn("protected mode: no password is set, so clients from other hosts are refused; " +
			"set password_file (or LOCKPROXY_PASSWORD) to serve them")
	} else {
		in.log.Warn("protected_mode = false and no password: ANY host that reaches " + in.cfg.Listen + " can take and release locks")
	}
}

// IsLoopbackListen reports whether a listen address only accepts clients
// on this host: a loopback address or localhost.
func IsLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && (host == "localhost" || resp.IsLoopback(addr))
}
