package resp

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// handshakeTimeout bounds a client's TLS handshake.
const handshakeTimeout = 10 * time.Second

// minHandshakes is the least bound on TLS handshakes under way, whatever
// max_clients.
const minHandshakes = 16

// tlsListener hands out TLS connections whose handshake is complete. Each
// handshake runs in its own goroutine within handshakeTimeout, so that a
// client that never finishes one holds up neither the accept loop (where
// refusals are written) nor anyone else. At most maxPending() handshakes
// run at once (max_clients, and never fewer than minHandshakes, so that a
// client refused at max_clients still hears why): a connection accepted
// beyond them is closed at once, so that silent connections cannot hold a
// file descriptor each for handshakeTimeout without bound.
type tlsListener struct {
	net.Listener
	cfg        *tls.Config
	failed     func(addr string, err error)
	refused    func(addr string, pending int64)
	maxPending func() int64
	pending    atomic.Int64 // handshakes under way
	conns      chan net.Conn

	once sync.Once
	err  error // why Accept stopped; set before done closes
	done chan struct{}
}

func newTLSListener(ln net.Listener, cfg *tls.Config, s *Server) *tlsListener {
	l := &tlsListener{Listener: ln, cfg: cfg, failed: s.tlsFailed, refused: s.tlsRefused, maxPending: s.maxClients.Load,
		conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *tlsListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.stop(err)
			return
		}
		if n := l.pending.Add(1); n > max(l.maxPending(), minHandshakes) {
			l.pending.Add(-1)
			_ = c.Close()
			l.refused(c.RemoteAddr().String(), n-1)
			continue
		}
		go l.handshake(c)
	}
}

func (l *tlsListener) handshake(c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	tc := tls.Server(c, l.cfg)
	err := tc.HandshakeContext(ctx)
	l.pending.Add(-1)
	if err != nil {
		c.Close()
		l.failed(c.RemoteAddr().String(), err)
		return
	}
	select {
	case l.conns <- tc:
	case <-l.done:
		tc.Close()
	}
}

// Accept returns the next connection that completed its handshake.
func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Close stops accepting; Accept then fails with net.ErrClosed.
func (l *tlsListener) Close() error {
	l.stop(net.ErrClosed)
	return l.Listener.Close()
}

func (l *tlsListener) stop(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

// tlsFailed logs failed handshakes (a plain-text client, an unknown
// certificate), a line per refusalLogEvery at most.
func (s *Server) tlsFailed(addr string, err error) {
	if ok, dropped := s.tlsLog.allow(); ok {
		s.log.Info("TLS handshake failed", zap.String("addr", addr), zap.Error(err), zap.Int("not_logged_since_last", dropped))
	}
}

// tlsRefused logs connections closed because max_clients handshakes were
// under way, a line per refusalLogEvery at most.
func (s *Server) tlsRefused(addr string, pending int64) {
	if ok, dropped := s.tlsLog.allow(); ok {
		s.log.Warn("TLS connection closed before its handshake: max_clients handshakes under way", zap.String("addr", addr),
			zap.Int64("handshakes", pending), zap.Int("not_logged_since_last", dropped))
	}
}
