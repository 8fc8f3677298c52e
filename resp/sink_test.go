package resp_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/resp"
	"go.uber.org/zap"
)

// put is one reply another goroutine writes through a connection's sink.
type put struct {
	sink  *resp.Sink
	reply string
}

// sinkServer serves LATER n, answered by another goroutine through the
// connection's Sink after delay (an upstream reply), and NOW n, answered
// by the connection's own goroutine, as passthrough does. It returns the
// address and the channel of the replies the answering goroutine flushed.
func sinkServer(t *testing.T, delay time.Duration, big int) (string, chan struct{}) {
	t.Helper()
	puts := make(chan put, 1<<14)
	flushed := make(chan struct{}, 1<<14)
	go func() {
		for p := range puts {
			time.Sleep(delay)
			if p.sink.Put([]byte(p.reply), false) {
				p.sink.Flush() // never blocks, even for a client that does not read
			}
			flushed <- struct{}{}
		}
	}()
	route := func(c *resp.Conn, args [][]byte) bool {
		n := string(args[1])
		switch strings.ToUpper(string(args[0])) {
		case "LATER":
			sink := c.Sink()
			sink.Expect()
			reply := "+" + n + "\r\n"
			if big > 0 {
				reply = "$" + strconv.Itoa(big+len(n)) + "\r\n" + n + strings.Repeat("x", big) + "\r\n"
			}
			puts <- put{sink, reply}
		case "NOW":
			c.Simple(n)
		default:
			return false
		}
		return true
	}
	srv, err := resp.NewServer(resp.Config{Route: route}, resp.NewTable(), connSession{opened: make(chan *resp.Conn, 16)}, zap.NewNop())
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
		close(puts)
	})
	return ln.Addr().String(), flushed
}

// TestSinkKeepsReplyOrder: replies another goroutine writes late through
// the sink and replies the connection writes at once reach the client in
// the order of the commands, within a batch and across batches.
func TestSinkKeepsReplyOrder(t *testing.T) {
	addr, _ := sinkServer(t, 2*time.Millisecond, 0)
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(nc)
	var sent []string
	send := func(cmds string) {
		t.Helper()
		for _, f := range strings.Fields(cmds) {
			kind, n, _ := strings.Cut(f, ":")
			sent = append(sent, n)
			if _, err := io.WriteString(nc, kind+" "+n+"\r\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One write (a batch), then batches of one command each.
	var b strings.Builder
	for i := range 20 {
		kind := "LATER"
		if i%3 == 1 {
			kind = "NOW"
		}
		b.WriteString(kind + " " + strconv.Itoa(i) + "\r\n")
		sent = append(sent, strconv.Itoa(i))
	}
	if _, err := io.WriteString(nc, b.String()); err != nil {
		t.Fatal(err)
	}
	send("LATER:a NOW:b LATER:c LATER:d NOW:e NOW:f")
	for i, want := range sent {
		got, err := readFrame(r)
		if err != nil || got != "+"+want {
			t.Fatalf("reply %d: got %q, %v; want +%s", i, got, err, want)
		}
	}
}

// TestSinkNeverBlocksTheWriter: a client that sends commands and reads
// none of their large replies does not block the goroutine that writes
// them (a shared upstream connection's reader, which other clients'
// replies wait for); the client then reads them all, whole and in order.
func TestSinkNeverBlocksTheWriter(t *testing.T) {
	const n, size = 200, 64 << 10 // far more than the socket buffers hold
	addr, flushed := sinkServer(t, 0, size)
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	var b strings.Builder
	for i := range n {
		b.WriteString("LATER " + strconv.Itoa(i) + "\r\n")
	}
	if _, err := io.WriteString(nc, b.String()); err != nil {
		t.Fatal(err)
	}
	bound := time.After(20 * time.Second)
	for i := range n {
		select {
		case <-flushed:
		case <-bound:
			t.Fatalf("the writer blocked after %d of %d replies, on a client that does not read", i, n)
		}
	}
	r := bufio.NewReader(nc)
	for i := range n {
		got, err := readFrame(r)
		if want := strconv.Itoa(i) + strings.Repeat("x", size); err != nil || got != want {
			t.Fatalf("reply %d: got %.20q (%d bytes), %v", i, got, len(got), err)
		}
	}
}

// TestSinkRepliesBeforeClose: a client that sends its commands and closes
// its side gets every reply another goroutine writes before the
// connection closes.
func TestSinkRepliesBeforeClose(t *testing.T) {
	addr, _ := sinkServer(t, 20*time.Millisecond, 0)
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(nc, "LATER 1\r\nNOW 2\r\nLATER 3\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = nc.(*net.TCPConn).CloseWrite()
	all, err := io.ReadAll(nc)
	if want := "+1\r\n+2\r\n+3\r\n"; err != nil || string(all) != want {
		t.Fatalf("got %q, %v; want %q", all, err, want)
	}
}
