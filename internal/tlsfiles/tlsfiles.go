// Package tlsfiles builds TLS configurations from PEM files and re-reads
// the files when they change, so that certificates are renewed without a
// restart. A file is checked (one stat) at most once a second, on the next
// handshake after that; a file that no longer loads (half written, say)
// leaves the previous certificate in use until it loads again.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
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

func newWatched[T any](load func() (T, error), failed func(error), files ...string) (*watched[T], error) {
	w := &watched[T]{files: files, load: load, failed: failed}
	stamp, err := w.stat()
	if err != nil {
		return nil, err
	}
	if w.cur, err = load(); err != nil {
		return nil, err
	}
	w.stamp, w.checked = stamp, time.Now()
	return w, nil
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
	pair, err := newWatched(loadPair(certFile, keyFile), failed, certFile, keyFile)
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
	cas, err := newWatched(loadPool(caFile), failed, caFile)
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
		pair, err := newWatched(loadPair(certFile, keyFile), failed, certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
	}
	return cfg, nil
}
