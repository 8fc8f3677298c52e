package instance

import (
	"crypto/tls"
	"errors"
	"net"

	"github.com/lockproxy/lockproxy/internal/tlsfiles"
	"go.uber.org/zap"
)

// TLSConfig is the client listener's TLS. With cert_file and key_file set
// the listener speaks TLS only. Files are re-read when they change.
type TLSConfig struct {
	CertFile string `toml:"cert_file"` // PEM certificate (chain) the listener presents
	KeyFile  string `toml:"key_file"`  // PEM private key of cert_file
	// CAFile, when set, makes TLS mutual: clients must present a
	// certificate signed by one of the PEM CAs in it.
	CAFile string `toml:"ca_file"`
}

// NodeTLS is TLS from lockproxy to the Redis nodes, or to the ZooKeeper
// servers. The files are re-read when they change and on SIGHUP.
type NodeTLS struct {
	Enabled    bool   `toml:"enabled"`
	CAFile     string `toml:"ca_file"`     // PEM CAs trusted for the nodes; empty: the system's
	CertFile   string `toml:"cert_file"`   // client certificate, for nodes with tls-auth-clients
	KeyFile    string `toml:"key_file"`    // its private key
	ServerName string `toml:"server_name"` // name expected in the nodes' certificates; empty: the host dialled
}

func (c Config) checkTLS() error {
	t := c.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("tls.cert_file and tls.key_file go together")
	}
	if t.CAFile != "" && t.CertFile == "" {
		return errors.New("tls.ca_file needs tls.cert_file and tls.key_file")
	}
	n := c.Redlock.TLS
	if (n.CertFile == "") != (n.KeyFile == "") {
		return errors.New("redlock.tls.cert_file and redlock.tls.key_file go together")
	}
	if !n.Enabled && (n.CAFile != "" || n.CertFile != "" || n.ServerName != "") {
		return errors.New("redlock.tls has files or a server name but enabled = false")
	}
	z := c.ZooKeeper.TLS
	if (z.CertFile == "") != (z.KeyFile == "") {
		return errors.New("zookeeper.tls.cert_file and zookeeper.tls.key_file go together")
	}
	if !z.Enabled && (z.CAFile != "" || z.CertFile != "" || z.ServerName != "") {
		return errors.New("zookeeper.tls has files or a server name but enabled = false")
	}
	return nil
}

// listenerTLS is the client listener's TLS configuration, nil without TLS.
func (in *Instance) listenerTLS() (*tls.Config, error) {
	t := in.cfg.TLS
	if t.CertFile == "" {
		return nil, nil
	}
	return in.tlsFiles.Server(t.CertFile, t.KeyFile, t.CAFile, in.reloadFailed)
}

// dialTLS is TLS toward the Redis nodes or the ZooKeeper servers as n
// describes it, nil when n is not enabled.
func (in *Instance) dialTLS(n NodeTLS) (*tlsfiles.Dialer, error) {
	if !n.Enabled {
		return nil, nil
	}
	return in.tlsFiles.Dialer(n.CAFile, n.CertFile, n.KeyFile, n.ServerName, in.reloadFailed)
}

// hostTLS is d's configuration for the host of addr (host:port).
func hostTLS(d *tlsfiles.Dialer, addr string) *tls.Config {
	if d == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return d.Config(host)
}

func (in *Instance) reloadFailed(err error) {
	in.log.Warn("a changed TLS file did not load; the previous certificate stays in use", zap.Error(err))
}
