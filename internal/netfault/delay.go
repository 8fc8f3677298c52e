package netfault

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections to a target, each chunk of bytes, in
// either direction, delay after it was read: a link with that much extra
// latency (not less bandwidth). While blackholed it forwards nothing.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration
	// toNode and fromNode are added to delay for the bytes sent to the
	// target and for those it sends back (SetRequestDelay, SetReplyDelay).
	toNode, fromNode atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	hole   chan struct{} // non-nil while blackholed; closed when it ends
	wg     sync.WaitGroup
}

// Listen starts a proxy to target on a free loopback port, with no delay.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay of bytes read from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// SetRequestDelay sets the extra delay, on top of SetDelay's, of bytes
// read from now on on their way to the target: a call that reaches the
// node late while its answer comes back at once.
func (p *Proxy) SetRequestDelay(d time.Duration) { p.toNode.Store(int64(d)) }

// SetReplyDelay sets the extra delay, on top of SetDelay's, of bytes read
// from now on on their way back from the target.
func (p *Proxy) SetReplyDelay(d time.Duration) { p.fromNode.Store(int64(d)) }

// SetBlackhole starts (true) or ends (false) a partition: while it lasts,
// connections stay open and new ones are accepted, but no byte reaches
// either side. When it ends, the bytes held meanwhile are delivered, late
// and in order, as TCP would deliver them after a short partition.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hole == nil:
		p.hole = make(chan struct{})
	case !on && p.hole != nil:
		close(p.hole)
		p.hole = nil
	}
}

// blackhole is closed when the current partition ends; nil when there is
// none.
func (p *Proxy) blackhole() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hole
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.SetBlackhole(false)
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track registers c for Close; false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c) || !p.track(up) {
		c.Close()
		up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(up, c, &p.toNode) })
	wg.Go(func() { p.pipe(c, up, &p.fromNode) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// chunk is bytes read, and when they may be written.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk delayed (by delay and extra); it
// closes both when either side fails.
func (p *Proxy) pipe(dst, src net.Conn, extra *atomic.Int64) {
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load() + extra.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	defer src.Close()
	for ch := range chunks {
		if wait := time.Until(ch.due); wait > 0 {
			time.Sleep(wait)
		}
		if hole := p.blackhole(); hole != nil {
			<-hole // Close ends the partition too
		}
		if _, err := dst.Write(ch.b); err != nil && !errors.Is(err, net.ErrClosed) {
			src.Close() // the reader stops, and chunks is closed
		}
	}
}
