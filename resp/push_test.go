package resp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/resp"
	"go.uber.org/zap"
)

// connSession hands each new connection to the test.
type connSession struct{ opened chan *resp.Conn }

func (s connSession) Opened(c *resp.Conn) { s.opened <- c }
func (connSession) Reset(*resp.Conn)      {}
func (connSession) Closed(*resp.Conn)     {}
func (connSession) Info(string) string    { return "" }

// readFrame reads one RESP value and renders it: a push as ">[a b]", a
// bulk string as itself, anything else as its line.
func readFrame(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty line")
	}
	switch line[0] {
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return line, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", err
		}
		if string(b[n:]) != "\r\n" {
			return "", fmt.Errorf("bulk string of %d bytes not ended by CRLF", n)
		}
		return string(b[:n]), nil
	case '*', '%', '>':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad header %q", line)
		}
		if line[0] == '%' {
			n *= 2
		}
		parts := make([]string, n)
		for i := range parts {
			if parts[i], err = readFrame(r); err != nil {
				return "", err
			}
		}
		return line[:1] + "[" + strings.Join(parts, " ") + "]", nil
	case '+', '-', ':', '_':
		return line, nil
	}
	return "", fmt.Errorf("not RESP: %q", line)
}

// TestPushNeverInsideAReply: pushes sent from another goroutine while a
// client reads large pipelined replies land between replies: the stream
// parses as whole replies, in order, and whole pushes, all of them. A push
// to a RESP2 connection sends nothing.
func TestPushNeverInsideAReply(t *testing.T) {
	const replies, pushes, size = 40, 300, 256 << 10
	big := strings.Repeat("x", size)
	table := resp.NewTable()
	if err := table.Add(resp.Command{Name: "big", Arity: 1, Handler: func(c *resp.Conn, _ [][]byte) { c.BulkString(big) }}); err != nil {
		t.Fatal(err)
	}
	sess := connSession{opened: make(chan *resp.Conn, 1)}
	srv, err := resp.NewServer(resp.Config{}, table, sess, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	})
	nc, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(nc)
	c := <-sess.opened
	if c.Push("locklost", "k", "resp2") {
		t.Fatal("a push was queued for a RESP2 connection")
	}
	if _, err := io.WriteString(nc, "HELLO 3\r\n"); err != nil {
		t.Fatal(err)
	}
	if h, err := readFrame(r); err != nil || !strings.HasPrefix(h, "%[server") {
		t.Fatalf("HELLO 3: %q %v", h, err)
	}

	done, flowing := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-flowing // while the replies are being written
		for i := range pushes {
			c.Push("locklost", "key:"+strconv.Itoa(i), "deleted")
			time.Sleep(50 * time.Microsecond)
		}
	}()
	if _, err := io.WriteString(nc, strings.Repeat("BIG\r\n", replies)); err != nil {
		t.Fatal(err)
	}
	gotReplies, gotPushes := 0, 0
	for gotReplies < replies || gotPushes < pushes {
		f, err := readFrame(r)
		switch {
		case err != nil:
			t.Fatalf("after %d replies and %d pushes: %v", gotReplies, gotPushes, err)
		case f == big:
			if gotReplies++; gotReplies == 1 {
				close(flowing)
			}
		case f == ">[locklost key:"+strconv.Itoa(gotPushes)+" deleted]":
			gotPushes++
		default:
			t.Fatalf("after %d replies and %d pushes: unexpected %.80q", gotReplies, gotPushes, f)
		}
	}
	<-done
}
