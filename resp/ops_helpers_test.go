package resp_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/resp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// opsServer is a resp.Server on a free loopback port whose table has one
// command, LOCK, that counts its calls and answers +OK.
type opsServer struct {
	addr  string
	srv   *resp.Server
	locks atomic.Int64
	logs  *observer.ObservedLogs
	tls   *tls.Config // for dial
}

type nopSession struct{}

func (nopSession) Opened(*resp.Conn)  {}
func (nopSession) Reset(*resp.Conn)   {}
func (nopSession) Closed(*resp.Conn)  {}
func (nopSession) Info(string) string { return "" }

func newOpsServer(t testing.TB, cfg resp.Config) *opsServer {
	t.Helper()
	s := &opsServer{}
	core, logs := observer.New(zapcore.InfoLevel)
	s.logs = logs
	table := resp.NewTable()
	if err := table.Add(resp.Command{Name: "lock", Arity: -2, Handler: func(c *resp.Conn, _ [][]byte) {
		s.locks.Add(1)
		c.OK()
	}}); err != nil {
		t.Fatal(err)
	}
	srv, err := resp.NewServer(cfg, table, nopSession{}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr, s.srv = ln.Addr().String(), srv
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// opsClient is a raw connection that sends bytes and reads RESP replies.
type opsClient struct {
	net.Conn
	r *bufio.Reader
}

func (s *opsServer) dial(t *testing.T) *opsClient {
	t.Helper()
	var c net.Conn
	var err error
	if s.tls != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", s.addr, s.tls)
	} else {
		c, err = net.Dial("tcp", s.addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &opsClient{Conn: c, r: bufio.NewReader(c)}
}

// do sends one command and returns its reply, flattened to text: "+OK",
// "-ERR ...", ":1", "$bulk", "*2[+a +b]".
func (c *opsClient) do(t *testing.T, args ...string) string {
	t.Helper()
	c.send(t, frame(args...))
	return c.reply(t)
}

func (c *opsClient) send(t *testing.T, raw string) {
	t.Helper()
	if _, err := io.WriteString(c.Conn, raw); err != nil {
		t.Fatal(err)
	}
}

func (c *opsClient) reply(t *testing.T) string {
	t.Helper()
	s, err := readReply(c.r)
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	return s
}

// closed reports whether the server closed the connection with nothing
// more to read: EOF, or a reset when the server closed with the client's
// bytes unread (as Redis's refusals do too).
func (c *opsClient) closed() bool {
	_, err := c.r.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch line[0] {
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "$nil", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return "$" + string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, n)
		for i := 0; i < n; i++ {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return fmt.Sprintf("*%d[%s]", n, strings.Join(parts, " ")), nil
	}
	return line, nil
}

func frame(args ...string) string {
	s := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	return s
}
