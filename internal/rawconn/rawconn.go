package rawconn

import (
	"context"
	"net"
	"time"
)

// Listener wraps every connection ln accepts.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) { return wrapped(l.Listener.Accept()) }

// DialTimeout is net.DialTimeout, wrapped; its signature is go-zookeeper's
// zk.Dialer.
func DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	return wrapped(net.DialTimeout(network, address, timeout))
}

// Dialer wraps what dial connects; its signature is go-redis's
// Options.Dialer.
func Dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return wrapped(dial(ctx, network, addr))
	}
}

// wrapped wraps the connection a dial or an accept returned.
func wrapped(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
