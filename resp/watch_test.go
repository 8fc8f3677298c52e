package resp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tidwall/redcon"
	"go.uber.org/zap"
)

// watchWait bounds every wait in these tests.
const watchWait = 5 * time.Second

// watchServer is a Server on a free loopback port with one more command,
// BLOCK [n], which watches the connection and then waits for gone or for
// the test to release it. With n it first waits, watching, until n bytes are
// read ahead, so that the test knows the watch has seen them.
type watchServer struct {
	addr    string
	srv     *Server
	blocked chan struct{}  // a BLOCK started watching
	ready   chan watchSeen // a BLOCK read n bytes ahead and waits
	events  chan string    // "gone" or "released", once per BLOCK
	release chan struct{}  // releases one BLOCK
	closed  chan uint64    // the Session's Closed callbacks
}

// watchSeen is what a BLOCK had read ahead when it reported ready.
type watchSeen struct{ n, capacity int }

func newWatchServer(t *testing.T, lim Limits) *watchServer {
	t.Helper()
	return newWatchServerConfig(t, Config{Limits: lim})
}

func newWatchServerConfig(t *testing.T, cfg Config) *watchServer {
	t.Helper()
	goroutines := runtime.NumGoroutine()
	s := &watchServer{
		blocked: make(chan struct{}, 16),
		ready:   make(chan watchSeen, 16),
		events:  make(chan string, 16),
		release: make(chan struct{}, 16),
		closed:  make(chan uint64, 16),
	}
	table := NewTable()
	if err := table.Add(Command{Name: "block", Arity: -1, Handler: s.block}); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, table, watchSession{s.closed}, zap.NewNop())
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
		ctx, cancel := context.WithTimeout(context.Background(), watchWait)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		watchNoLeak(t, goroutines)
	})
	return s
}

func (s *watchServer) block(c *Conn, args [][]byte) {
	want := 0
	if len(args) > 1 {
		want, _ = strconv.Atoi(string(args[1]))
	}
	if !s.readAhead(c, want) {
		s.events <- "gone"
		c.Simple("GONE")
		return
	}
	gone, stop := c.WatchClose()
	defer stop()
	select {
	case <-gone:
		s.events <- "gone"
		c.Simple("GONE")
	case <-s.release:
		s.events <- "released"
		c.Simple("RELEASED")
	case <-time.After(watchWait):
		c.Error("ERR not released")
	}
}

// readAhead watches c until want bytes wait read ahead, and reports them on
// s.ready. To look at the lookahead it stops the watch every millisecond and
// starts another. It returns false if gone closed.
func (s *watchServer) readAhead(c *Conn, want int) bool {
	g := c.rc.NetConn().(*guardConn)
	deadline := time.Now().Add(watchWait)
	for first := true; ; first = false {
		gone, stop := c.WatchClose()
		if first {
			s.blocked <- struct{}{}
		}
		select {
		case <-gone:
			stop()
			return false
		case <-time.After(time.Millisecond):
		}
		stop()
		if len(g.look) >= want || time.Now().After(deadline) {
			s.ready <- watchSeen{len(g.look), cap(g.look)}
			return true
		}
	}
}

type watchSession struct{ closed chan<- uint64 }

func (watchSession) Opened(*Conn)       {}
func (watchSession) Reset(*Conn)        {}
func (watchSession) Info(string) string { return "" }

func (s watchSession) Closed(c *Conn) {
	select {
	case s.closed <- c.ID():
	default:
	}
}

func (s *watchServer) dial(t *testing.T) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(watchWait)); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), bufio.NewReader(c)
}

// watchFor waits for a value on ch.
func watchFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(watchWait):
		t.Fatalf("no %s within %v", what, watchWait)
		panic("unreachable")
	}
}

// event waits for the BLOCK's outcome and wants it to be want.
func (s *watchServer) event(t *testing.T, want string) {
	t.Helper()
	if got := watchFor(t, s.events, "BLOCK outcome"); got != want {
		t.Fatalf("BLOCK ended %q, want %q", got, want)
	}
}

// noEvent wants the BLOCK to be still waiting.
func (s *watchServer) noEvent(t *testing.T) {
	t.Helper()
	select {
	case got := <-s.events:
		t.Fatalf("BLOCK ended %q while it should wait", got)
	default:
	}
}

func watchWrite(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// watchReplies reads n replies, each raw.
func watchReplies(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		if line[0] == '$' {
			size, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
			data := make([]byte, max(size+2, 0))
			if _, err := io.ReadFull(r, data); err != nil {
				t.Fatalf("after %q: %v", out, err)
			}
			line += string(data)
		}
		out = append(out, line)
	}
	return out
}

// watchEOF wants the server to have closed the connection.
func watchEOF(t *testing.T, r *bufio.Reader) {
	t.Helper()
	if b, err := r.ReadByte(); err == nil {
		rest, _ := r.Peek(r.Buffered())
		t.Fatalf("got %q, want the connection closed", append([]byte{b}, rest...))
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want the connection closed", err)
	}
}

func watchEqual(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("replies\n%q\nwant\n%q", got, want)
	}
}

// watchNoLeak waits until no more goroutines run than before the test.
func watchNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(watchWait)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWatchCloseClientGone(t *testing.T) {
	tests := []struct {
		name string
		end  func(c *net.TCPConn) error
	}{
		{"close", (*net.TCPConn).Close},
		{"reset", func(c *net.TCPConn) error { _ = c.SetLinger(0); return c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newWatchServer(t, Limits{})
			c, _ := s.dial(t)
			watchWrite(t, c, "BLOCK\r\n")
			watchFor(t, s.blocked, "BLOCK")
			if err := tt.end(c); err != nil {
				t.Fatal(err)
			}
			s.event(t, "gone")
			watchFor(t, s.closed, "Closed callback")
		})
	}
}

// TestWatchCloseHalfClosed has the client shut its writing side after a
// PING: gone closes, the PING is still served, then the server closes.
func TestWatchCloseHalfClosed(t *testing.T) {
	s := newWatchServer(t, Limits{})
	c, r := s.dial(t)
	watchWrite(t, c, "BLOCK\r\n")
	watchFor(t, s.blocked, "BLOCK")
	watchWrite(t, c, "PING\r\n")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	s.event(t, "gone")
	watchEqual(t, watchReplies(t, r, 2), "+GONE\r\n", "+PONG\r\n")
	watchEOF(t, r)
	watchFor(t, s.closed, "Closed callback")
}

func TestWatchClosePipelined(t *testing.T) {
	s := newWatchServer(t, Limits{})
	c, r := s.dial(t)
	more := "PING\r\nECHO hi\r\n"
	watchWrite(t, c, fmt.Sprintf("BLOCK %d\r\n", len(more)))
	watchFor(t, s.blocked, "BLOCK")
	watchWrite(t, c, more)
	if seen := watchFor(t, s.ready, "read ahead"); seen.n != len(more) {
		t.Fatalf("read %d bytes ahead, want %d", seen.n, len(more))
	}
	s.noEvent(t)
	s.release <- struct{}{}
	s.event(t, "released")
	watchEqual(t, watchReplies(t, r, 3), "+RELEASED\r\n", "+PONG\r\n", "$2\r\nhi\r\n")
	watchWrite(t, c, "PING\r\n")
	watchEqual(t, watchReplies(t, r, 1), "+PONG\r\n")
}

func TestWatchCloseQuit(t *testing.T) {
	tests := []struct {
		name   string
		before string // sent with BLOCK
		after  string // sent while BLOCK waits
		want   []string
	}{
		{name: "multibulk", after: "*1\r\n$4\r\nQUIT\r\n", want: []string{"+OK\r\n"}},
		{name: "inline", after: "quit\r\n", want: []string{"+OK\r\n"}},
		{name: "inline without CR", after: "QuIt\n", want: []string{"+OK\r\n"}},
		{name: "quoted", after: "  'qu\\it'  \r\n", want: []string{"+OK\r\n"}},
		{name: "with arguments", after: "*2\r\n$4\r\nquiT\r\n$1\r\nx\r\n", want: []string{"+OK\r\n"}},
		{
			name: "pipelined", after: "PING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nQUIT\r\nPING\r\n",
			want: []string{"+PONG\r\n", "$1\r\nx\r\n", "+OK\r\n"},
		},
		{name: "in the batch", before: "PING\r\nQUIT\r\n", want: []string{"+PONG\r\n", "+OK\r\n"}},
		{name: "completing a frame", before: "*1\r\n$4\r\nqu", after: "it\r\n", want: []string{"+OK\r\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newWatchServer(t, Limits{})
			c, r := s.dial(t)
			watchWrite(t, c, "BLOCK\r\n"+tt.before)
			watchFor(t, s.blocked, "BLOCK")
			watchWrite(t, c, tt.after)
			s.event(t, "gone")
			watchEqual(t, watchReplies(t, r, 1+len(tt.want)), append([]string{"+GONE\r\n"}, tt.want...)...)
			watchEOF(t, r)
			watchFor(t, s.closed, "Closed callback")
		})
	}
}

// TestWatchCloseNotQuit sends what is not a QUIT command, though "quit" is in it.
func TestWatchCloseNotQuit(t *testing.T) {
	tests := []struct {
		name   string
		before string // sent with BLOCK
		after  string // sent while BLOCK waits
		want   []string
	}{
		{name: "inline argument", after: "ECHO QUIT\r\n", want: []string{"$4\r\nQUIT\r\n"}},
		{name: "bulk argument", after: "*2\r\n$4\r\nECHO\r\n$4\r\nquit\r\n", want: []string{"$4\r\nquit\r\n"}},
		{name: "bulk argument begun", before: "*2\r\n$4\r\nECHO\r\n$4\r\n", after: "QUIT\r\n", want: []string{"$4\r\nQUIT\r\n"}},
		{name: "inline argument begun", before: "ECHO ", after: "QUIT\r\n", want: []string{"$4\r\nQUIT\r\n"}},
		{name: "longer", after: "QUITS\r\n", want: []string{"-ERR unknown command 'QUITS', with args beginning with: \r\n"}},
		{name: "shorter", after: "*1\r\n$3\r\nQUI\r\n", want: []string{"-ERR unknown command 'QUI', with args beginning with: \r\n"}},
		{name: "escaped tab", after: "\"qui\\t\"\r\n", want: []string{"-ERR unknown command 'qui\t', with args beginning with: \r\n"}},
		{name: "incomplete", after: "QUIT"},
		{name: "incomplete bulk", after: "*1\r\n$4\r\nQUIT\r"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newWatchServer(t, Limits{})
			c, r := s.dial(t)
			watchWrite(t, c, fmt.Sprintf("BLOCK %d\r\n%s", len(tt.after), tt.before))
			watchFor(t, s.blocked, "BLOCK")
			watchWrite(t, c, tt.after)
			if seen := watchFor(t, s.ready, "read ahead"); seen.n != len(tt.after) {
				t.Fatalf("read %d bytes ahead, want %d", seen.n, len(tt.after))
			}
			s.noEvent(t)
			s.release <- struct{}{}
			s.event(t, "released")
			watchEqual(t, watchReplies(t, r, 1+len(tt.want)), append([]string{"+RELEASED\r\n"}, tt.want...)...)
			if len(tt.want) == 0 { // complete the command: now it is QUIT
				watchWrite(t, c, "\n")
				watchEqual(t, watchReplies(t, r, 1), "+OK\r\n")
				watchEOF(t, r)
			}
		})
	}
}

// TestWatchCloseFlood sends more than MaxRequest bytes while BLOCK waits:
// the watch reads MaxRequest bytes and no more, gone does not close, and
// redcon gets the bytes once BLOCK returns.
func TestWatchCloseFlood(t *testing.T) {
	const maxRequest = 1024
	pings := strings.Repeat("PING\r\n", 400)
	pongs := slices.Repeat([]string{"+PONG\r\n"}, 400)
	tests := []struct {
		name  string
		flood string
		want  []string
		close bool // the server closes the connection after want
	}{
		{name: "commands", flood: pings, want: pongs},
		{
			name: "one request", flood: "*2\r\n$4\r\nECHO\r\n$2000\r\n" + strings.Repeat("x", 2000) + "\r\nPING\r\n",
			want: []string{"-ERR Protocol error: too big request\r\n"}, close: true,
		},
		{name: "QUIT after the limit", flood: pings + "QUIT\r\n", want: append(pongs, "+OK\r\n"), close: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newWatchServer(t, Limits{MaxRequest: maxRequest})
			c, r := s.dial(t)
			watchWrite(t, c, fmt.Sprintf("BLOCK %d\r\n", maxRequest))
			watchFor(t, s.blocked, "BLOCK")
			watchWrite(t, c, tt.flood) // the kernel's buffers take the rest
			seen := watchFor(t, s.ready, "read ahead")
			if seen.n != maxRequest || seen.capacity > maxRequest {
				t.Fatalf("read %d bytes ahead into %d, want %d", seen.n, seen.capacity, maxRequest)
			}
			s.noEvent(t)
			s.release <- struct{}{}
			s.event(t, "released")
			want := append([]string{"+RELEASED\r\n"}, tt.want...)
			watchEqual(t, watchReplies(t, r, len(want)), want...)
			if tt.close {
				watchEOF(t, r)
				watchFor(t, s.closed, "Closed callback")
			}
		})
	}
}

// TestWatchCloseServerClose closes the server while BLOCK waits.
func TestWatchCloseServerClose(t *testing.T) {
	s := newWatchServer(t, Limits{})
	c, _ := s.dial(t)
	watchWrite(t, c, "BLOCK\r\n")
	watchFor(t, s.blocked, "BLOCK")
	ctx, cancel := context.WithTimeout(context.Background(), watchWait)
	defer cancel()
	if err := s.srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s.event(t, "gone")
	watchFor(t, s.closed, "Closed callback")
}

// watchDeadlineConn records the read deadlines set on it.
type watchDeadlineConn struct {
	net.Conn
	deadlines chan time.Time
}

func (c *watchDeadlineConn) SetReadDeadline(t time.Time) error {
	c.deadlines <- t
	return c.Conn.SetReadDeadline(t)
}

// TestWatchStop checks that stop ends the goroutine and clears the read
// deadline (the next Read sets the idle timeout's), that Read then serves the bytes read ahead, and that a Read
// stops a watch its handler forgot to.
func TestWatchStop(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	cli, srv := net.Pipe()
	defer cli.Close()
	dc := &watchDeadlineConn{Conn: srv, deadlines: make(chan time.Time, 8)}
	g := Guard(dc, Limits{}).(*guardConn)

	for _, how := range []string{"stop", "Read"} {
		gone, stop := g.watchClose()
		w := g.watch
		watchWrite(t, cli, "PING\r\n") // returns once the watch has read it
		if how == "stop" {
			stop()
			select {
			case <-w.done:
			default:
				t.Fatal("stop returned while the goroutine reads")
			}
		}
		buf := make([]byte, 64)
		n, err := g.Read(buf)
		if string(buf[:n]) != "PING\r\n" || err != nil {
			t.Fatalf("%s: Read = %q, %v; want PING", how, buf[:n], err)
		}
		if g.watch != nil {
			t.Fatalf("%s: the watch still runs", how)
		}
		var got []time.Time
		for range 3 {
			got = append(got, watchFor(t, dc.deadlines, "deadline"))
		}
		if !got[0].IsZero() || got[1].After(time.Now()) || !got[2].IsZero() {
			t.Fatalf("%s: read deadlines %v; want none while watching, one past, then none", how, got)
		}
		select {
		case <-gone:
			t.Fatalf("%s: gone closed", how)
		default:
		}
	}
	srv.Close()
	watchNoLeak(t, goroutines)
}

// FuzzWatchQuit streams data at a guarded connection, the first pre bytes
// read by redcon before a watch starts and the rest, in chunks sized by
// split, while it watches; with eof the client then closes. gone must close
// iff the bytes the watch took hold a complete QUIT command, as redcon
// parses the guarded stream, or the watch read the client's close; and
// after stop, Read must return what it returns when nothing watches.
func FuzzWatchQuit(f *testing.F) {
	seeds := []string{
		"QUIT\r\n", "quit\n", "*1\r\n$4\r\nQuIt\r\n", "*2\r\n$4\r\nquit\r\n$1\r\nx\r\n",
		"ECHO QUIT\r\n", "*2\r\n$4\r\nECHO\r\n$4\r\nQUIT\r\n", "\"quit\"\r\n", "'qu\\it' x\r\n", "\"qui\\t\"\r\n",
		"PING\r\nQUIT\r\n", "QUITS\r\nQUI\r\n", "  quit  \r\n", "quit\r\r\n", "*1\r\n$4\r\nquit\n\n",
		"*1\r\n$100\r\nquit\r\n", "*0\r\nQUIT\r\n", "*1\r\n$4\r\nquit\r\n*0\r\n", "a\"b\"\r\nquit\r\n",
		strings.Repeat("x", 40) + "\r\nquit\r\n",
	}
	for i, s := range seeds {
		for preset := range uint8(len(watchFuzzLimits)) {
			f.Add([]byte(s), []byte{}, uint16(i%len(s)), preset, i%2 == 0)
			f.Add([]byte(s), []byte{byte(i), 0, 3}, uint16(len(s)/2), preset, i%2 == 1)
		}
	}
	// A frame over the limit read before the watch, then the client closes.
	f.Add([]byte("*00000A0000000000"), []byte("0"), uint16(17), uint8(0), true)
	f.Fuzz(func(t *testing.T, data, split []byte, pre uint16, preset uint8, eof bool) {
		lim := watchFuzzLimits[int(preset)%len(watchFuzzLimits)].WithDefaults()
		k := int(pre) % (len(data) + 1)
		got, readErr, gone, took := watchFuzzRun(t, lim, data[:k], watchSplit(data[k:], split), eof)
		seen := data[:k+took]
		quit, doomed := watchRefQuit(seen, lim)
		wantGone := quit || eof && took == len(data)-k && took < lim.MaxRequest
		// The guard does not check inline quotes: after a line redcon
		// refuses, a QUIT may count, which does no harm, as redcon closes
		// the connection when it reads that line.
		if gone != wantGone && !(gone && doomed) {
			t.Fatalf("gone %v, want %v: %d bytes then %d watched of %q (eof %v)", gone, wantGone, k, took, data, eof)
		}
		want, wantErr := watchRefRead(seen, k, lim)
		if !bytes.Equal(got, want) || !watchSameErr(readErr, wantErr) {
			t.Fatalf("Read got %q, %v; want %q, %v", got, readErr, want, wantErr)
		}
	})
}

// watchSameErr compares Read errors; a limit error by its limit only.
func watchSameErr(a, b error) bool {
	var la, lb *LimitError
	if errors.As(a, &la) && errors.As(b, &lb) {
		return la.Err == lb.Err
	}
	return a == b
}

var watchFuzzLimits = []Limits{
	{MaxBulk: 2, MaxArgs: 2, MaxInline: 4, MaxRequest: 16},
	{MaxBulk: 16, MaxArgs: 4, MaxInline: 32, MaxRequest: 64},
	{},
}

// watchFuzzRun reads pre through a guard over a pipe, then watches while the
// client writes chunks. It returns what the guard's Reads returned up to
// their error, that error, whether gone closed, and how many bytes of chunks
// the watch took.
func watchFuzzRun(t *testing.T, lim Limits, pre []byte, chunks [][]byte, eof bool) (got []byte, readErr error, gone bool, took int) {
	cli, srv := net.Pipe()
	defer srv.Close()
	g := Guard(srv, lim).(*guardConn)
	go func() { _, _ = io.Copy(io.Discard, cli) }() // the guard's error replies
	watching, written := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(written)
		if len(pre) > 0 {
			if _, err := cli.Write(pre); err != nil {
				return
			}
		}
		<-watching
		for _, c := range chunks {
			if len(c) == 0 {
				continue // an empty Write on a pipe waits for a Read
			}
			if _, err := cli.Write(c); err != nil {
				return
			}
		}
		if eof {
			cli.Close()
		}
	}()
	buf := make([]byte, max(len(pre), 64))
	if len(pre) > 0 {
		n, _ := g.Read(buf[:len(pre)]) // takes all of pre, which the writer wrote at once
		got = append(got, buf[:n]...)
	}

	goneCh, stop := g.watchClose()
	w := g.watch
	close(watching)
	if w != nil {
		wait := written // then the watch took every byte
		if eof {
			wait = w.done // the watch ends on the close, a QUIT or a full lookahead
		}
		select {
		case <-wait:
		case <-w.done:
		case <-time.After(watchWait):
			t.Fatal("the watch neither took every byte nor stopped")
		}
	}
	stop()
	if w != nil {
		select {
		case <-w.done:
		default:
			t.Fatal("stop returned while the goroutine reads")
		}
	}
	select {
	case <-goneCh:
		gone = true
	default:
	}
	took = len(g.look)
	cli.Close()
	<-written
	for {
		n, err := g.Read(buf[:64])
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err, gone, took
		}
	}
}

// watchSplit cuts data into pieces of split[0]+1, split[1]+1, ... bytes,
// round and round; into one piece when split is empty.
func watchSplit(data, split []byte) [][]byte {
	if len(split) == 0 {
		return [][]byte{data}
	}
	var chunks [][]byte
	for i := 0; len(data) > 0; i++ {
		n := min(len(data), int(split[i%len(split)])+1)
		chunks, data = append(chunks, data[:n]), data[n:]
	}
	return chunks
}

// watchStream is a connection that reads data and discards what is written.
type watchStream struct {
	net.Conn
	r io.Reader
}

func (s *watchStream) Read(p []byte) (int, error)       { return s.r.Read(p) }
func (s *watchStream) Write(p []byte) (int, error)      { return len(p), nil }
func (s *watchStream) SetWriteDeadline(time.Time) error { return nil }

// watchRefQuit reports whether redcon, reading data through a guard byte by
// byte, so that it parses each command as soon as it is complete, gets a
// QUIT command.
func watchRefQuit(data []byte, lim Limits) (quit, doomed bool) {
	rd := redcon.NewReader(iotest.OneByteReader(Guard(&watchStream{r: bytes.NewReader(data)}, lim)))
	for {
		cmds, err := rd.ReadCommands()
		for _, c := range cmds {
			if strings.EqualFold(string(c.Args[0]), "quit") {
				return true, false
			}
		}
		if err != nil {
			return false, err != io.EOF
		}
	}
}

// watchRefRead returns what Reads of a guard over data return, and their
// error, when the first Read is of pre bytes and the others of 64.
func watchRefRead(data []byte, pre int, lim Limits) ([]byte, error) {
	g := Guard(&watchStream{r: bytes.NewReader(data)}, lim)
	var out []byte
	buf := make([]byte, max(pre, 64))
	if pre > 0 {
		n, _ := g.Read(buf[:pre])
		out = append(out, buf[:n]...)
	}
	for {
		n, err := g.Read(buf[:64])
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}
