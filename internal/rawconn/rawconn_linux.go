package rawconn

import (
	"io"
	"net"
	"os"
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
	return &conn{Conn: c, raw: raw}
}

// conn is a net.Conn whose Read and Write are raw system calls; everything
// else is c's.
type conn struct {
	net.Conn
	raw syscall.RawConn
}

// SyscallConn is c's, for callers that inspect the socket (go-redis checks
// a pooled connection's health through it).
func (c *conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case 0:
				n = int(r)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until the socket is readable
			default:
				errno = e
				return true
			}
		}
	})
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

func (c *conn) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait until the socket is writable
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
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
