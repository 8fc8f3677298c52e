// Package tlsfiles builds TLS configurations from PEM files and re-reads
// the files when they change, so that certificates are renewed without a
// restart. A file is checked (one stat) at most once a second, on the next
// handshake after that; a file that no longer loads (half written, say)
// leaves the previous certificate in use until it loads again. A Group
// re-reads all its files at once, changed or not (SIGHUP).
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// checkEvery is how often the files are stat'ed for a change.
const checkEvery = time.Second

// watched holds what was loaded from some files and reloads it when one of
// them changes (modification time or size).
type watched[T any] struct {
	files  []string
	load   func() (T, error)
	failed func(error) // told of a reload that failed; may be nil

	mu      sync.Mutex
	cur     T
	stamp   string
	checked time.Time
}

func newWatched[T any](g *Group, load func() (T, error), failed func(error), files ...string) (*watched[T], error) {
	w := &watched[T]{files: files, load: load, failed: failed}
	stamp, err := w.stat()
	if err != nil {
		return nil, err
	}
	if w.cur, err = load(); err != nil {
		return nil, err
	}
	w.stamp, w.checked = stamp, time.Now()
	g.add(w.reload)
	return w, nil
}

// reload re-reads the files now, changed or not. On an error the previous
// value stays in use.
func (w *watched[T]) reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	stamp, err := w.stat()
	if err != nil {
		return err
	}
	v, err := w.load()
	if err != nil {
		return err
	}
	w.cur, w.stamp, w.checked = v, stamp, time.Now()
	return nil
}

// Group is the files behind some TLS configurations, re-read together by
// Reload. The zero value is ready; a nil *Group keeps no list.
type Group struct {
	mu      sync.Mutex
	reloads []func() error
}

func (g *Group) add(reload func() error) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reloads = append(g.reloads, reload)
}

// Reload re-reads every file of the group now, even those whose
// modification time did not change. A file that does not load is reported
// in the error and its previous content stays in use; the others are
// still reloaded.
func (g *Group) Reload() error {
	g.mu.Lock()
	reloads := slices.Clone(g.reloads)
	g.mu.Unlock()
	var errs []error
	for _, r := range reloads {
		errs = append(errs, r())
	}
	return errors.Join(errs...)
}

func (w *watched[T]) stat() (string, error) {
	stamp := ""
	for _, f := range w.files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%s:%d:%d;", f, fi.ModTime().UnixNano(), fi.Size())
	}
	return stamp, nil
}

// get returns the current value, reloading it first if a file changed.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checked) < checkEvery {
		return w.cur
	}
	w.checked = time.Now()
	stamp, err := w.stat()
	if err == nil && stamp == w.stamp {
		return w.cur
	}
	v, lerr := w.load()
	if err = errors.Join(err, lerr); err != nil {
		if w.failed != nil {
			w.failed(err)
		}
		return w.cur
	}
	w.cur, w.stamp = v, stamp
	return w.cur
}

func loadPair(certFile, keyFile string) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: certificate %s, key %s: %w", certFile, keyFile, err)
		}
		return &c, nil
	}
}

func loadPool(caFile string) func() (*x509.CertPool, error) {
	return func() (*x509.CertPool, error) {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", caFile)
		}
		return pool, nil
	}
}

// Server returns the TLS configuration of a listener serving the
// certificate in certFile with the key in keyFile. With caFile, clients
// must present a certificate signed by one of its CAs (mutual TLS).
// failed is told of reloads that fail.
func Server(certFile, keyFile, caFile string, failed func(error)) (*tls.Config, error) {
	return (*Group)(nil).Server(certFile, keyFile, caFile, failed)
}

// Server is the package's Server with its files in g.
func (g *Group) Server(certFile, keyFile, caFile string, failed func(error)) (*tls.Config, error) {
	pair, err := newWatched(g, loadPair(certFile, keyFile), failed, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	base := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.get(), nil },
	}
	if caFile == "" {
		return base, nil
	}
	cas, err := newWatched(g, loadPool(caFile), failed, caFile)
	if err != nil {
		return nil, err
	}
	cfg := base.Clone()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = cas.get()
		return c, nil
	}
	return cfg, nil
}

// Client returns the TLS configuration of a client that trusts the CAs in
// caFile (empty: the system's roots), presents the certificate in certFile
// with the key in keyFile if they are given, and expects serverName (empty:
// the host it dials).
func Client(caFile, certFile, keyFile, serverName string, failed func(error)) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pool, err := loadPool(caFile)()
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		pair, err := newWatched(nil, loadPair(certFile, keyFile), failed, certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
	}
	return cfg, nil
}

// Dialer is TLS toward servers whose CA file and client certificate are
// re-read when they change: every connection it configures verifies the
// server against the CA file's current content.
type Dialer struct {
	roots      *watched[*x509.CertPool] // nil: the system's roots
	pair       *watched[*tls.Certificate]
	serverName string
}

// Dialer trusts the CAs in caFile (empty: the system's roots), presents
// the certificate in certFile with the key in keyFile if they are given,
// and expects serverName (empty: the host dialled) in the servers'
// certificates. Its files are in g.
func (g *Group) Dialer(caFile, certFile, keyFile, serverName string, failed func(error)) (*Dialer, error) {
	d := &Dialer{serverName: serverName}
	var err error
	if caFile != "" {
		if d.roots, err = newWatched(g, loadPool(caFile), failed, caFile); err != nil {
			return nil, err
		}
	}
	if certFile != "" || keyFile != "" {
		if d.pair, err = newWatched(g, loadPair(certFile, keyFile), failed, certFile, keyFile); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Config is the TLS configuration of a connection to host (a name or an
// IP address, without the port).
func (d *Dialer) Config(host string) *tls.Config {
	name := d.serverName
	if name == "" {
		name = host
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
	if d.pair != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return d.pair.get(), nil }
	}
	if d.roots != nil {
		// The CA file can change, so the chain is verified here, against its
		// current content, in place of crypto/tls's check against a fixed
		// pool (the pattern of tls.Config.VerifyConnection's example).
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return d.verify(cs, name) }
	}
	return cfg
}

// verify checks the server's chain against the CA file and name.
func (d *Dialer) verify(cs tls.ConnectionState, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server presented no certificate")
	}
	opts := x509.VerifyOptions{Roots: d.roots.get(), DNSName: name, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}
