package instance_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// rssBytes is this process's resident set size.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// partialRequest is a 4 MiB request (ECHO and four 1 MiB strings, each
// within max_bulk_bytes) less its last byte.
func partialRequest() []byte {
	var b bytes.Buffer
	b.WriteString("*5\r\n$4\r\nECHO\r\n")
	for range 4 {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", 1<<20, bytes.Repeat([]byte("x"), 1<<20))
	}
	return b.Bytes()[:b.Len()-1]
}

// TestUnauthenticatedPartialRequests: 100 connections that have not
// authenticated each send a 4 MiB request but its last byte. Redis's
// unauthenticated limits refuse it at its first long string, so lockproxy
// buffers next to nothing for them.
//
// lockproxy runs in this process, so the RSS measured is lockproxy's plus
// the test clients': its growth is an upper bound of lockproxy's, and the
// Go runtime returns no memory between the two readings, so a transient
// peak shows too.
func TestUnauthenticatedPartialRequests(t *testing.T) {
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Password = "secret"
	in := startInstance(t, cfg)
	req := partialRequest()

	runtime.GC()
	debug.FreeOSMemory()
	before := rssBytes(t)
	const conns = 100
	replies := make([]string, conns)
	var wg sync.WaitGroup
	for i := range conns {
		c, err := net.DialTimeout("tcp", in.Addr(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // held open by the client until the end
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			for rest := req; len(rest) > 0; { // until the server closes
				n, err := c.Write(rest[:min(len(rest), 64<<10)])
				if err != nil {
					break
				}
				rest = rest[n:]
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			replies[i] = line
		}()
	}
	wg.Wait()
	after := rssBytes(t)
	t.Logf("RSS %d -> %d bytes (+%d) with %d unauthenticated connections each sending a partial 4 MiB request", before, after, after-before, conns)
	for i, r := range replies {
		if r != "-ERR Protocol error: unauthenticated bulk length\r\n" {
			t.Fatalf("connection %d got %q", i, r)
		}
	}
	if grew := after - before; grew > 20<<20 {
		t.Fatalf("RSS grew by %d bytes, want under 20 MiB", grew)
	}
}

// TestAuthTimeout: a connection that has not authenticated within
// auth_timeout_ms is closed; an authenticated one is not.
func TestAuthTimeout(t *testing.T) {
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Password = "secret"
	cfg.Limits.AuthTimeoutMS = 300
	in := startInstance(t, cfg)

	authed := dialRaw(t, in.Addr())
	if got := authed.do("AUTH", "secret"); got != "+OK" {
		t.Fatalf("AUTH: %q", got)
	}
	silent := dialRaw(t, in.Addr())
	if got := silent.do("PING"); got != "-NOAUTH Authentication required." {
		t.Fatalf("PING before AUTH: %q", got)
	}
	waitClosed(t, silent, 20*time.Second)
	if got := authed.do("PING"); got != "+PONG" {
		t.Fatalf("the authenticated connection: %q", got)
	}
}

// waitClosed waits until the server has closed r's connection.
func waitClosed(t *testing.T, r *rawConn, within time.Duration) {
	t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(within))
	// EOF, or a reset when the server closed with bytes of ours unread.
	if _, err := io.Copy(io.Discard, r.rd); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection was not closed within %v", within)
	}
}

// TestIdleTimeout: a connection silent for idle_timeout_ms is closed, one
// blocked in LOCK ... WAIT for longer is not.
func TestIdleTimeout(t *testing.T) {
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Limits.IdleTimeoutMS = 300
	in := startInstance(t, cfg)
	key := uniqueKey(t)

	holder := dialRaw(t, in.Addr())
	if got := holder.do("LOCK", key, "PX", "60000", "TOKEN", "t"); !strings.HasPrefix(got, "[t ") {
		t.Fatalf("LOCK: %q", got)
	}
	waiter := dialRaw(t, in.Addr())
	waiter.send(fmt.Sprintf("*6\r\n$4\r\nLOCK\r\n$%d\r\n%s\r\n$2\r\nPX\r\n$4\r\n1000\r\n$4\r\nWAIT\r\n$4\r\n3000\r\n", len(key), key))
	idle := dialRaw(t, in.Addr())
	waitClosed(t, idle, 20*time.Second)
	// The holder was idle too and is closed; whether its lock went with it
	// or not, the waiter gets a reply, not a closed connection.
	if got := waiter.reply(); got != "(nil)" && !strings.HasPrefix(got, "[") {
		t.Fatalf("LOCK ... WAIT: %q", got)
	}
	if got := waiter.do("PING"); got != "+PONG" {
		t.Fatalf("PING after the wait: %q", got)
	}
}

// TestMaxBufferedBytes: two clients each send 600 KB of a request while
// all clients together may buffer 1 MB: one of them gets the error and is
// closed, the other completes its request.
func TestMaxBufferedBytes(t *testing.T) {
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Limits.MaxBufferedBytes = 1 << 20
	in := startInstance(t, cfg)

	const size = 600 << 10
	head := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n", size)
	body := strings.Repeat("x", size)
	a, b := dialRaw(t, in.Addr()), dialRaw(t, in.Addr())
	for _, c := range []*rawConn{a, b} {
		c.send(head + body[:size-10])
	}
	other := dialRaw(t, in.Addr())
	if got := other.do("PING"); got != "+PONG" {
		t.Fatalf("another client: %q", got)
	}
	type reply struct {
		c   *rawConn
		got string
		err error
	}
	replies := make(chan reply, 2)
	for _, c := range []*rawConn{a, b} {
		go func() {
			_ = c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
			got, err := readReply(c.rd)
			replies <- reply{c, got, err}
		}()
	}
	// Nothing completes either request: the server refuses whichever
	// connection's bytes pass the cap, once it has read them.
	first := <-replies
	if first.got != "-ERR max buffered bytes of all clients reached" {
		t.Fatalf("first reply: %.60q, %v", first.got, first.err)
	}
	waitClosed(t, first.c, 20*time.Second)
	rest := a
	if first.c == a {
		rest = b
	}
	rest.send(body[size-10:] + "\r\n")
	if second := <-replies; second.got != body {
		t.Fatalf("the other request: %.60q, %v", second.got, second.err)
	}
	if got := other.do("PING"); got != "+PONG" {
		t.Fatalf("another client after: %q", got)
	}
}
