package zookeeper

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
)

// tlsDialer dials the ensemble's servers over TLS, configured by cfg for
// each server's host. go-zookeeper gives a dial one second, which a JVM's
// first handshakes can exceed; the handshake may take up to handshake.
// A failed handshake is logged once until it fails differently or
// succeeds, since go-zookeeper retries it without end.
func tlsDialer(cfg func(host string) *tls.Config, handshake time.Duration, log *zap.Logger) zk.Dialer {
	var mu sync.Mutex
	last := ""
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(timeout, handshake))
		defer cancel()
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg(host)}
		conn, err := d.DialContext(ctx, network, addr)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		mu.Lock()
		changed := msg != last
		last = msg
		mu.Unlock()
		if err != nil && changed {
			log.Warn("ZooKeeper: TLS connection refused", zap.String("server", addr), zap.Error(err))
		}
		return conn, err
	}
}
