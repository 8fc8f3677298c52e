package zktest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections on a loopback port to a ZooKeeper server
// until it is cut: then it closes them, and closes new ones at once, as a
// network partition between a client and ZooKeeper would (the server hears
// nothing more, and expires the client's session after its timeout).
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

// NewProxy starts a proxy to target; it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	return p
}

// Addr is the address clients connect to instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.forward(c)
		p.mu.Unlock()
	}
}

// forward connects c to the target, unless cut; p.mu is held.
func (p *Proxy) forward(c net.Conn) {
	if p.cut {
		c.Close()
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.conns = append(p.conns, c, s)
	go pipe(c, s)
	go pipe(s, c)
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Cut closes every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}
