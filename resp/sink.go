package resp

import (
	"net"
	"sync"
	"syscall"
)

// Sink writes to the client the replies of commands that another
// goroutine answers (passthrough's reader of a shared upstream
// connection), in the order the connection's goroutine announced them
// (Expect), without that goroutine waiting for each: the answering
// goroutine puts each reply (Put) and writes what it put once per burst
// (Flush), which never blocks it. Whatever the connection's goroutine
// writes itself goes after the replies expected before it and before
// those expected after it: it waits for the former (Wait) and writes its
// own buffered replies before expecting more.
type Sink struct {
	w *wire

	mu      sync.Mutex
	expect  int    // replies announced, not yet put
	buf     []byte // replies put, not yet written
	spare   []byte // the buffer last written, reused for buf
	marked  bool   // a Put asked its caller to Flush, which has not yet run
	writing bool   // a goroutine writes buf, blocking (the socket took less than all)
	err     error  // a write failed: later replies are dropped
	waiting bool   // the connection's goroutine waits in Wait
	wake    chan struct{}
	raw     *rawWriter // made on the first Flush
}

// maxSinkBuf is the size beyond which a written sink buffer is not kept.
const maxSinkBuf = 64 << 10

// Sink is the connection's sink, made on first use, or nil when the
// connection streams (Stream), whose writes take the stream's turn.
// Call it from the connection's goroutine.
func (c *Conn) Sink() *Sink {
	if c.stream != nil {
		return nil
	}
	if c.rc.sink == nil {
		c.rc.sink = &Sink{w: c.rc, wake: make(chan struct{}, 1)}
		c.rc.g.sink = c.rc.sink
	}
	return c.rc.sink
}

// Expect announces one more reply that another goroutine will Put. The
// replies the connection's goroutine buffered are written first. Call it
// from the connection's goroutine, before the command is sent.
func (s *Sink) Expect() {
	if len(s.w.out) > 0 {
		_ = s.w.Flush()
	}
	s.mu.Lock()
	s.expect++
	s.mu.Unlock()
}

// Pending is how many expected replies were not yet put, and how many
// bytes of put ones not yet written.
func (s *Sink) Pending() (replies, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expect, len(s.buf)
}

// Put adds the next expected reply, whole RESP frames, or drops it when
// quiet (CLIENT REPLY said so when its command came). It reports whether
// the caller must Flush the sink, after this and its other replies of the
// burst; a caller that is told so must. Any goroutine may call it.
func (s *Sink) Put(reply []byte, quiet bool) (flush bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expect--
	if !quiet && s.err == nil {
		s.buf = append(s.buf, reply...)
	}
	if len(s.buf) > 0 && !s.writing && !s.marked {
		s.marked = true
		flush = true
	}
	s.signal()
	return flush
}

// Flush writes the replies put so far without blocking: what the socket
// does not take at once is written by a goroutine of its own, which the
// replies put meanwhile follow.
func (s *Sink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marked = false
	if s.writing || len(s.buf) == 0 {
		return
	}
	n, err, done := s.tryWrite(s.buf)
	switch {
	case err != nil:
		s.err, s.buf = err, s.buf[:0]
	case done:
		s.buf = s.buf[:0]
	default:
		s.buf = s.buf[:copy(s.buf, s.buf[n:])]
		s.writing = true
		go s.writeRest()
	}
	if len(s.buf) == 0 && cap(s.buf) > maxSinkBuf {
		s.buf = nil
	}
	s.signal()
}

// writeRest writes buf, blocking, until nothing is left.
func (s *Sink) writeRest() {
	for {
		s.mu.Lock()
		if len(s.buf) == 0 || s.err != nil {
			s.writing, s.buf = false, s.buf[:0]
			s.signal()
			s.mu.Unlock()
			return
		}
		out := s.buf
		s.buf, s.spare = s.spare[:0], nil
		s.mu.Unlock()
		_, err := s.w.g.Write(out)
		s.mu.Lock()
		if cap(out) <= maxSinkBuf {
			s.spare = out[:0]
		}
		if err != nil {
			s.err = err
		}
		s.mu.Unlock()
	}
}

// Wait returns once every expected reply was put and written (or dropped
// after a failed write). Call it from the connection's goroutine.
func (s *Sink) Wait() {
	for {
		s.mu.Lock()
		if s.drained() {
			s.waiting = false
			s.mu.Unlock()
			return
		}
		s.waiting = true
		s.mu.Unlock()
		<-s.wake
	}
}

func (s *Sink) drained() bool { return s.expect == 0 && len(s.buf) == 0 && !s.writing }

// signal wakes Wait once the sink drained; s.mu is held.
func (s *Sink) signal() {
	if s.waiting && s.drained() {
		s.waiting = false
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// rawWriter writes to a socket without blocking, allocating nothing per
// write (a RawConn and the function it calls are made once).
type rawWriter struct {
	rc    syscall.RawConn // nil: the socket has none (TLS)
	write func(fd uintptr) bool
	b     []byte
	n     int
	err   error
}

func newRawWriter(c net.Conn) *rawWriter {
	w := &rawWriter{}
	if sc, ok := c.(syscall.Conn); ok {
		w.rc, _ = sc.SyscallConn()
	}
	w.write = func(fd uintptr) bool {
		for w.n < len(w.b) {
			m, e := syscall.Write(int(fd), w.b[w.n:])
			if e == syscall.EINTR {
				continue
			}
			if e != nil && e != syscall.EAGAIN {
				w.err = e
			}
			if e != nil || m <= 0 {
				break
			}
			w.n += m
		}
		return true // never wait for the socket
	}
	return w
}

// tryWrite writes what the socket takes of b now, without blocking and
// between two whole writes of others (a push, a batch of replies); done
// when it took all of b. A socket that cannot be written without blocking
// (TLS) takes nothing. s.mu is held.
func (s *Sink) tryWrite(b []byte) (n int, err error, done bool) {
	if s.raw == nil {
		s.raw = newRawWriter(s.w.g.Conn)
	}
	w, g := s.raw, s.w.g
	if w.rc == nil || !g.wmu.TryLock() {
		return 0, nil, false
	}
	defer g.wmu.Unlock()
	w.b, w.n, w.err = b, 0, nil
	err = w.rc.Write(w.write)
	if err == nil {
		err = w.err
	}
	n = w.n
	w.b = nil
	return n, err, err == nil && n == len(b)
}
