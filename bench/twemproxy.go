package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/proctest"
)

// startTwemproxy runs twemproxy (Debian's package nutcracker) in front of
// the data Redis at data: a C proxy with one event loop and one pipelined
// connection to the server, the reference issue 14's bar is set against.
// Measured in the same run, it shows what any proxy costs on this machine.
// bin is its executable, looked up in PATH; when it is not installed, the
// reference is left out (nil proxy, and why).
func startTwemproxy(ctx context.Context, bin, dir, data string) (*proxy, string, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Sprintf("twemproxy left out: %s not found (Debian: apt-get install nutcracker)", bin), nil
	}
	ports, err := proctest.FreePorts(2)
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	conf := filepath.Join(dir, "twemproxy.yml")
	// One pool, one server, one connection to it (twemproxy's default),
	// as lockproxy's shared upstream connection.
	yml := fmt.Sprintf("data:\n  listen: %s\n  redis: true\n  timeout: 5000\n  servers:\n   - %s:1\n", addr, data)
	if err := os.WriteFile(conf, []byte(yml), 0o644); err != nil {
		return nil, "", err
	}
	p := &proctest.Proc{}
	cmd := exec.Command(path, "-c", conf, "-s", strconv.Itoa(ports[1]), "-a", "127.0.0.1")
	logPath := filepath.Join(dir, "twemproxy.log")
	if err := p.Start(cmd, logPath); err != nil {
		return nil, "", err
	}
	if err := awaitProxy(ctx, addr, p.Exited()); err != nil {
		return nil, "", errors.Join(fmt.Errorf("twemproxy: %w; %s", err, proctest.LogTail(logPath)), p.Stop())
	}
	pid := p.PID()
	return &proxy{addr: addr, desc: fmt.Sprintf("%s pid %d", path, pid), pid: pid, stop: p.Stop}, "", nil
}

// awaitProxy waits until a SET through the proxy at addr succeeds, at most
// readyTimeout, or until the proxy exits.
func awaitProxy(ctx context.Context, addr string, exited <-chan struct{}) error {
	c := redis.NewClient(twemproxyOptions(addr, 1))
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err := retryUntil(ctx, 50*time.Millisecond, exited, func() error { return c.Set(ctx, "bench:pt:ready", "x", 0).Err() })
	if err != nil {
		return fmt.Errorf("not serving within %v: %w", readyTimeout, err)
	}
	return nil
}

// twemproxyOptions is ptOptions for twemproxy. go-redis opens every
// connection with HELLO, which twemproxy answers by closing it; Redis
// before 6 answers an error, after which go-redis goes on in RESP2. The
// dialer gives that error itself: set-up only, the measured commands pass
// unchanged.
func twemproxyOptions(addr string, conc int) *redis.Options {
	o := ptOptions(addr, conc)
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &noHello{Conn: nc}, nil
	}
	return o
}

// noHello answers HELLO with Redis 5's error instead of sending it.
type noHello struct {
	net.Conn
	reply []byte // the error, until read
}

var helloCommand = []byte("$5\r\nhello\r\n")

// isHello reports whether b starts with a HELLO command: an array header,
// then HELLO's name as its first bulk string.
func isHello(b []byte) bool {
	i := bytes.IndexByte(b, '\n')
	if len(b) == 0 || b[0] != '*' || i < 0 {
		return false
	}
	name := b[i+1:]
	return len(name) >= len(helloCommand) && bytes.EqualFold(name[:len(helloCommand)], helloCommand)
}

func (c *noHello) Write(b []byte) (int, error) {
	if isHello(b) {
		c.reply = []byte("-ERR unknown command 'HELLO'\r\n")
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *noHello) Read(b []byte) (int, error) {
	if len(c.reply) > 0 {
		n := copy(b, c.reply)
		c.reply = c.reply[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
