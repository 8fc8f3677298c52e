package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line through conn and reads it back.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo %q: %q %v", line, got, err)
	}
	return time.Since(start)
}

// TestDelay: bytes pass through unchanged and in order, and a round trip
// under a delay d takes at least 2d (there and back). Only the lower bound
// is checked: a loaded machine may take longer.
func TestDelay(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "hello")
	const d = 50 * time.Millisecond
	p.SetDelay(d)
	if took := roundTrip(t, c, r, "slow"); took < 2*d {
		t.Fatalf("round trip under a %v delay took %v, want at least %v", d, took, 2*d)
	}
	p.SetDelay(0)
	for i := range 100 {
		roundTrip(t, c, r, string(rune('a'+i%26)))
	}
}

// TestBlackhole: while blackholed nothing comes back; once it ends, what was
// sent meanwhile arrives, in order, on the same connection.
func TestBlackhole(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	roundTrip(t, c, r, "before")
	p.SetBlackhole(true)
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if got, err := r.ReadString('\n'); err == nil {
		t.Fatalf("read %q through a blackhole", got)
	}
	p.SetBlackhole(false)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the blackhole: %q %v", got, err)
	}
	roundTrip(t, c, r, "after")
}

// TestDirectionDelays: a request delay holds bytes on their way to the
// target only, a reply delay on their way back only (lower bounds only: a
// loaded machine may take longer).
func TestDirectionDelays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	arrived := make(chan time.Time, 4)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			arrived <- time.Now()
			if _, err := c.Write([]byte(line)); err != nil {
				return
			}
		}
	}()
	p, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	const d = 400 * time.Millisecond
	p.SetRequestDelay(d)
	sent := time.Now()
	roundTrip(t, c, r, "to")
	if at := (<-arrived).Sub(sent); at < d {
		t.Errorf("a request delay of %v: the line reached the target after %v", d, at)
	}
	p.SetRequestDelay(0)
	p.SetReplyDelay(d)
	sent = time.Now()
	rt := roundTrip(t, c, r, "from")
	if at := (<-arrived).Sub(sent); at >= d {
		t.Errorf("a reply delay of %v held the line on its way to the target: %v", d, at)
	}
	if rt < d {
		t.Errorf("a reply delay of %v: round trip %v", d, rt)
	}
}
