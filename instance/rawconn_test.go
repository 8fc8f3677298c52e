package instance_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawConn speaks RESP by hand, to send what real clients never would.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// dialProto is dialRaw, switched to RESP3 with HELLO 3 when proto is 3.
func dialProto(t *testing.T, addr string, proto int) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	if proto == 3 {
		c.send("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
		c.reply()
	}
	return c
}

// do sends one command as a multibulk and returns the reply.
func (r *rawConn) do(args ...string) string {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	r.send(b.String())
	return r.reply()
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

// reply reads one reply and renders it compactly: +OK, -ERR .., :1, $-1 as
// (nil), arrays and maps as [a b], pushes as >[a b], RESP3 null as (nil).
func (r *rawConn) reply() string {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	s, err := readReply(r.rd)
	if err != nil {
		r.t.Fatalf("reading reply: %v", err)
	}
	return s
}

// closed reports whether the server closed the connection.
func (r *rawConn) closed() bool {
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := r.rd.ReadByte()
	return err == io.EOF
}

func readReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty line")
	}
	body := line[1:]
	switch line[0] {
	case '+', '-', ':':
		return line, nil
	case '_':
		return "(nil)", nil
	case '$':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return "(nil)", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*', '%', '>', '~':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return "(nil)", nil
		}
		if line[0] == '%' {
			n *= 2
		}
		parts := make([]string, n)
		for i := range parts {
			if parts[i], err = readReply(rd); err != nil {
				return "", err
			}
		}
		if line[0] == '>' { // a RESP3 push: told apart from replies
			return ">[" + strings.Join(parts, " ") + "]", nil
		}
		return "[" + strings.Join(parts, " ") + "]", nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
