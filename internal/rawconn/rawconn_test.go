package rawconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection, the client's wrapped
// by wrap, and closes them when the test ends.
func pair(t testing.TB, wrap func(net.Conn) net.Conn) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	client = wrap(c)
	t.Cleanup(func() { client.Close(); s.Close() })
	return client, s
}

func plain(c net.Conn) net.Conn { return c }

// wraps are the connections every behaviour is checked on: the wrapped one
// must do what the plain one does.
var wraps = []struct {
	name string
	wrap func(net.Conn) net.Conn
}{{"plain", plain}, {"raw", Wrap}}

func TestWrapIsRaw(t *testing.T) {
	c, _ := pair(t, Wrap)
	if _, ok := c.(*conn); !ok {
		t.Fatalf("Wrap returned %T, want *conn", c)
	}
	if _, ok := c.(syscall.Conn); !ok {
		t.Fatal("the wrapped conn hides its SyscallConn")
	}
}

func TestReadWriteBothWays(t *testing.T) {
	for _, w := range wraps {
		t.Run(w.name, func(t *testing.T) {
			c, s := pair(t, w.wrap)
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 6)
			if _, err := io.ReadFull(s, got); err != nil || string(got) != "PING\r\n" {
				t.Fatalf("server read %q, %v", got, err)
			}
			if _, err := s.Write([]byte("+PONG\r\n")); err != nil {
				t.Fatal(err)
			}
			got = make([]byte, 7)
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "+PONG\r\n" {
				t.Fatalf("client read %q, %v", got, err)
			}
			if n, err := c.Read(nil); n != 0 || err != nil {
				t.Fatalf("empty read: %d, %v", n, err)
			}
		})
	}
}

// A write larger than the socket buffers fills them, waits in the poller
// for the reader and still writes every byte, in order.
func TestWriteMoreThanTheBuffers(t *testing.T) {
	for _, w := range wraps {
		t.Run(w.name, func(t *testing.T) {
			c, s := pair(t, w.wrap)
			want := make([]byte, 16<<20)
			for i := range want {
				want[i] = byte(i * 7)
			}
			got := make(chan []byte, 1)
			go func() {
				time.Sleep(50 * time.Millisecond) // let the writer fill the buffers first
				b, _ := io.ReadAll(io.LimitReader(s, int64(len(want))))
				got <- b
			}()
			n, err := c.Write(want)
			if err != nil || n != len(want) {
				t.Fatalf("write: %d, %v", n, err)
			}
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("read %d bytes, not the ones written", len(b))
			}
		})
	}
}

func TestReadEOF(t *testing.T) {
	for _, w := range wraps {
		t.Run(w.name, func(t *testing.T) {
			c, s := pair(t, w.wrap)
			s.Write([]byte("x"))
			s.Close()
			b, err := io.ReadAll(c)
			if err != nil || string(b) != "x" {
				t.Fatalf("read %q, %v; want x then EOF", b, err)
			}
			if _, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("read after EOF: %v, want io.EOF itself", err)
			}
		})
	}
}

// A deadline ends a blocked Read with os.ErrDeadlineExceeded, a timeout,
// and clearing it lets the next Read wait again: resp's close watch relies on
// both.
func TestReadDeadline(t *testing.T) {
	for _, w := range wraps {
		t.Run(w.name, func(t *testing.T) {
			c, s := pair(t, w.wrap)
			done := blockedRead(c)
			c.SetReadDeadline(time.Unix(1, 0))
			err := <-done
			var ne net.Error
			if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("read past its deadline: %v, want a timeout", err)
			}
			c.SetReadDeadline(time.Time{})
			s.Write([]byte("y"))
			b := make([]byte, 1)
			if _, err := c.Read(b); err != nil || b[0] != 'y' {
				t.Fatalf("read after the deadline was cleared: %q, %v", b, err)
			}
		})
	}
}

// blockedRead starts a one-byte Read of c, gives it time to block, and
// returns its error when it ends.
func blockedRead(c net.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	return done
}

func TestUseAfterClose(t *testing.T) {
	for _, w := range wraps {
		t.Run(w.name, func(t *testing.T) {
			c, _ := pair(t, w.wrap)
			done := blockedRead(c)
			c.Close()
			if err := <-done; !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read blocked at close: %v, want net.ErrClosed", err)
			}
			if _, err := c.Write([]byte("z")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("write after close: %v, want net.ErrClosed", err)
			}
			var oe *net.OpError
			if _, err := c.Read(make([]byte, 1)); !errors.As(err, &oe) || oe.Op != "read" {
				t.Fatalf("read after close: %v, want a *net.OpError for read", err)
			}
		})
	}
}

// A reset by the peer is a syscall error, as net reports it.
func TestWriteAfterReset(t *testing.T) {
	for _, w := range wraps {
		t.Run(w.name, func(t *testing.T) {
			c, s := pair(t, w.wrap)
			s.(*net.TCPConn).SetLinger(0) // close with RST
			s.Close()
			time.Sleep(20 * time.Millisecond)
			var err error
			for range 100 { // the first write may still be accepted
				if _, err = c.Write([]byte("w")); err != nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
			var se *os.SyscallError
			if !errors.As(err, &se) || !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("write to a reset connection: %v, want ECONNRESET or EPIPE", err)
			}
		})
	}
}

func TestListenerAndDialersWrap(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Listener(inner)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := <-accepted
	defer a.Close()
	var d net.Dialer
	c2, err := Dialer(d.DialContext)(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for name, x := range map[string]net.Conn{"accepted": a, "DialTimeout": c, "Dialer": c2} {
		if _, ok := x.(*conn); !ok {
			t.Errorf("%s: %T, want *conn", name, x)
		}
	}
	if _, err := DialTimeout("tcp", "127.0.0.1:1", time.Second); err == nil {
		t.Error("DialTimeout to a closed port: no error")
	}
}

// A Read or Write allocates nothing: they run on every request.
func TestNoAllocations(t *testing.T) {
	c, s := pair(t, Wrap)
	go io.Copy(s, s) // echo
	buf := make([]byte, 16)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per write and read, want 0", allocs)
	}
}
