package instance

import (
	"errors"
	"net"
	"os"

	"github.com/lockproxy/lockproxy/resp"
	"go.uber.org/zap"
)

// secrets are the passwords in use, read from their files if so configured.
type secrets struct {
	clients string // what clients give with AUTH
	users   []resp.User
	nodes   string // what lockproxy gives the Redis nodes
}

// ErrStartup is matched (errors.Is) by every StartError.
var ErrStartup = errors.New("cannot start")

// StartError is a start-up failure that the operator fixes in the
// configuration or on the host — a file that cannot be read, an address
// that cannot be bound, nodes that are not what the configuration says —
// rather than a fault of lockproxy: the command line prints it as one line
// and exits 2.
type StartError struct {
	Key string // the configuration key (or flag) at fault
	Err error
}

func (e *StartError) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap exposes ErrStartup and the cause.
func (e *StartError) Unwrap() []error { return []error{ErrStartup, e.Err} }

// startError wraps err, when not nil, as a StartError of key.
func startError(key string, err error) error {
	if err == nil {
		return nil
	}
	var se *StartError
	if errors.As(err, &se) {
		return err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err // "bind: address already in use", without Go's "listen tcp ..." around it
	}
	return &StartError{Key: key, Err: err}
}

// files are the configured files, by key, that must be readable at start.
func (c Config) files() [][2]string {
	var out [][2]string
	add := func(key, path string) {
		if path != "" {
			out = append(out, [2]string{key, path})
		}
	}
	add("password_file", c.PasswordFile)
	add("redlock.password_file", c.Redlock.PasswordFile)
	add("tls.cert_file", c.TLS.CertFile)
	add("tls.key_file", c.TLS.KeyFile)
	add("tls.ca_file", c.TLS.CAFile)
	for prefix, t := range map[string]NodeTLS{"redlock.tls.": c.Redlock.TLS, "zookeeper.tls.": c.ZooKeeper.TLS} {
		if t.Enabled {
			add(prefix+"ca_file", t.CAFile)
			add(prefix+"cert_file", t.CertFile)
			add(prefix+"key_file", t.KeyFile)
		}
	}
	return out
}

// checkFiles refuses a configured file that cannot be read, naming its key.
func (c Config) checkFiles() error {
	for _, f := range c.files() {
		fh, err := os.Open(f[1])
		if err != nil {
			return &StartError{Key: f[0], Err: err}
		}
		fh.Close()
	}
	return nil
}

// prepare reads what Start needs from files (passwords, certificates) and
// logs the configuration's warnings. Each failure is a StartError.
func (in *Instance) prepare() error {
	if err := in.cfg.checkFiles(); err != nil {
		return err
	}
	if err := in.readFiles(); err != nil {
		return err
	}
	for _, w := range in.cfg.Warnings() {
		in.log.Warn(w)
	}
	return nil
}

// readFiles reads the passwords and certificates.
func (in *Instance) readFiles() (err error) {
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
		return startError("tls", err)
	}
	if in.nodesTLS, err = in.dialTLS(in.cfg.Redlock.TLS); err != nil {
		return startError("redlock.tls", err)
	}
	if in.zkTLS, err = in.dialTLS(in.cfg.ZooKeeper.TLS); err != nil {
		return startError("zookeeper.tls", err)
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
