package rawconn

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Wrap returns c with raw reads and writes, or c itself when it exposes no
// file descriptor.
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rc := &conn{Conn: c, raw: raw}
	rc.rd.fn, rc.wr.fn = rc.readFD, rc.writeFD
	return rc
}

// conn is a net.Conn whose Read and Write are raw system calls; everything
// else is c's.
type conn struct {
	net.Conn
	raw    syscall.RawConn
	rd, wr call
}

// call is the Read or the Write in progress. Its callback is built once, in
// Wrap, so a call allocates nothing. mu keeps concurrent calls in one
// direction apart, as the socket's own lock, held by RawConn for the whole
// call, already does.
type call struct {
	mu    sync.Mutex
	buf   []byte
	n     int // bytes moved
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// do runs the callback through rw (the RawConn's Read or Write) over p.
func (k *call) do(rw func(func(uintptr) bool) error, p []byte) (int, syscall.Errno, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.buf, k.n, k.errno = p, 0, 0
	err := rw(k.fn)
	k.buf = nil
	return k.n, k.errno, err
}

// SyscallConn is c's, for callers that inspect the socket (go-redis checks
// a pooled connection's health through it).
func (c *conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := c.rd.do(c.raw.Read, p)
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readFD reads once into c.rd.buf; false asks RawConn to wait until the
// socket is readable.
func (c *conn) readFD(fd uintptr) bool {
	k := &c.rd
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&k.buf[0])), uintptr(len(k.buf)))
		switch e {
		case 0:
			k.n = int(r)
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			k.errno = e
			return true
		}
	}
}

func (c *conn) Write(p []byte) (int, error) {
	n, errno, err := c.wr.do(c.raw.Write, p)
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
}

// writeFD writes the rest of c.wr.buf; false asks RawConn to wait until the
// socket is writable.
func (c *conn) writeFD(fd uintptr) bool {
	k := &c.wr
	for k.n < len(k.buf) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&k.buf[k.n])), uintptr(len(k.buf)-k.n))
		switch e {
		case 0:
			k.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			k.errno = e
			return true
		}
	}
	return true
}

// opError wraps err as net.Conn's own Read and Write do, so errors.Is finds
// net.ErrClosed and os.ErrDeadlineExceeded as before.
func (c *conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok { // RawConn's own, "raw-read" or "raw-write"
		err = oe.Err
	}
	if errno, ok := err.(syscall.Errno); ok {
		err = &os.SyscallError{Syscall: op, Err: errno}
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
