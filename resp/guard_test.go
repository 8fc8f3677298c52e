package resp_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/resp"
)

// guardTestLimits are small enough to hit in a table.
var guardTestLimits = resp.Limits{MaxBulk: 16, MaxArgs: 4, MaxInline: 32, MaxRequest: 64}

// guardConn is a net.Conn that reads scripted chunks, one per Read, and records what is written.
type guardConn struct {
	chunks [][]byte
	out    bytes.Buffer
	writes int
}

func (c *guardConn) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

func (c *guardConn) Write(p []byte) (int, error) {
	c.writes++
	return c.out.Write(p)
}

func (c *guardConn) Close() error                     { return nil }
func (c *guardConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *guardConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *guardConn) SetDeadline(time.Time) error      { return nil }
func (c *guardConn) SetReadDeadline(time.Time) error  { return nil }
func (c *guardConn) SetWriteDeadline(time.Time) error { return nil }

// guardCounter counts the bytes read through it.
type guardCounter struct {
	r io.Reader
	n int
}

func (c *guardCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// guardResult is what redcon made of a byte stream.
type guardResult struct {
	cmds    []string // each command, Raw and Args quoted
	err     error    // the error that ended ReadCommands
	reply   string   // what the guard wrote to the conn
	read    int      // bytes redcon got
	maxArgs int      // most arguments in one command
	maxBulk int      // longest argument
}

// guardRun feeds chunks to redcon's Reader, through Guard when guarded, until it fails.
func guardRun(lim resp.Limits, chunks [][]byte, guarded bool) guardResult {
	cp := make([][]byte, len(chunks))
	copy(cp, chunks)
	conn := &guardConn{chunks: cp}
	var nc net.Conn = conn
	if guarded {
		nc = resp.Guard(conn, lim)
	}
	counter := &guardCounter{r: nc}
	rd := redcon.NewReader(counter)
	var res guardResult
	for res.err == nil {
		var cmds []redcon.Command
		cmds, res.err = rd.ReadCommands()
		for _, c := range cmds {
			res.cmds = append(res.cmds, fmt.Sprintf("%q %q", c.Raw, c.Args))
			res.maxArgs = max(res.maxArgs, len(c.Args))
			for _, a := range c.Args {
				res.maxBulk = max(res.maxBulk, len(a))
			}
		}
	}
	res.reply, res.read = conn.out.String(), counter.n
	if conn.writes > 1 {
		res.reply += fmt.Sprintf(" (%d writes)", conn.writes)
	}
	return res
}

// guardArgs renders commands given as words the way guardRun renders them.
func guardArgs(cmds ...[]string) []string {
	var out []string
	for _, words := range cmds {
		raw := guardFrame(words...)
		args := make([][]byte, len(words))
		for i, w := range words {
			args[i] = []byte(w)
		}
		out = append(out, fmt.Sprintf("%q %q", raw, args))
	}
	return out
}

// guardFrame encodes words as a multibulk request.
func guardFrame(words ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(words))
	for _, w := range words {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(w), w)
	}
	return b.String()
}

// guardChunkings splits data every way a test should see it: whole, a byte
// at a time, in two at every position, and in random pieces.
func guardChunkings(data []byte) map[string][][]byte {
	out := map[string][][]byte{"whole": {data}}
	var ones [][]byte
	for i := range data {
		ones = append(ones, data[i:i+1])
	}
	out["bytes"] = ones
	for i := 1; i < len(data); i++ {
		out[fmt.Sprintf("split%d", i)] = [][]byte{data[:i], data[i:]}
	}
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var parts [][]byte
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(12))
			parts, rest = append(parts, rest[:n]), rest[n:]
		}
		out[fmt.Sprintf("random%d", seed)] = parts
	}
	return out
}

func TestGuardLimits(t *testing.T) {
	x := func(n int) string { return strings.Repeat("x", n) }
	limitReply := map[error]string{
		resp.ErrBulkTooLong:     "-ERR Protocol error: invalid bulk length\r\n",
		resp.ErrTooManyArgs:     "-ERR Protocol error: invalid multibulk length\r\n",
		resp.ErrInlineTooLong:   "-ERR Protocol error: too big inline request\r\n",
		resp.ErrRequestTooLarge: "-ERR Protocol error: too big request\r\n",
	}
	tests := []struct {
		name  string
		lim   resp.Limits // guardTestLimits if zero
		in    string
		want  []string // commands delivered
		err   error    // a resp sentinel, or nil for io.EOF
		reply string   // written to the conn; limitReply[err] if empty
	}{
		{name: "bulk at limit", in: guardFrame(x(16)), want: guardArgs([]string{x(16)})},
		{name: "bulk over limit", in: guardFrame(x(17)), err: resp.ErrBulkTooLong},
		{name: "args at limit", in: guardFrame("a", "b", "c", "d"), want: guardArgs([]string{"a", "b", "c", "d"})},
		{name: "args over limit", in: guardFrame("a", "b", "c", "d", "e"), err: resp.ErrTooManyArgs},
		{name: "request at limit", in: guardFrame(x(16), x(16), x(8)), want: guardArgs([]string{x(16), x(16), x(8)})},
		{name: "request over limit", in: guardFrame(x(16), x(16), x(9)), err: resp.ErrRequestTooLarge},
		{
			name: "request over limit in headers", lim: resp.Limits{MaxRequest: 12},
			in: "*1\r\n$0000001\r\nx\r\n", err: resp.ErrRequestTooLarge,
		},
		{
			name: "count header at limit", lim: resp.Limits{MaxArgs: 4},
			in: "*" + strings.Repeat("0", 29) + "1\r\n$1\r\nx\r\n", want: []string{fmt.Sprintf("%q %q",
				"*"+strings.Repeat("0", 29)+"1\r\n$1\r\nx\r\n", [][]byte{[]byte("x")})},
		},
		{
			name: "count header over limit", lim: resp.Limits{MaxArgs: 4},
			in: "*" + strings.Repeat("0", 30) + "1\r\n$1\r\nx\r\n", err: resp.ErrHeaderTooLong,
			reply: "-ERR Protocol error: too big mbulk count string\r\n",
		},
		{
			name: "length header at limit", lim: resp.Limits{MaxBulk: 4},
			in: "*1\r\n$" + strings.Repeat("0", 29) + "1\r\nx\r\n", want: []string{fmt.Sprintf("%q %q",
				"*1\r\n$"+strings.Repeat("0", 29)+"1\r\nx\r\n", [][]byte{[]byte("x")})},
		},
		{
			name: "length header over limit", lim: resp.Limits{MaxBulk: 4},
			in: "*1\r\n$" + strings.Repeat("0", 30) + "1\r\nx\r\n", err: resp.ErrHeaderTooLong,
			reply: "-ERR Protocol error: too big bulk count string\r\n",
		},
		{name: "huge length", in: "*1\r\n$99999999999999999999999999\r\n", err: resp.ErrBulkTooLong},
		{name: "huge count", in: "*99999999999999999999999999\r\n", err: resp.ErrTooManyArgs},
		// redcon's parseInt wraps around: to it this is a count of 8446744073709551617, and it spins.
		{name: "huge negative count", in: "*-9999999999999999999\r\n", err: resp.ErrTooManyArgs},
		{name: "huge negative length", in: "*1\r\n$-9999999999999999999\r\n", err: resp.ErrBulkTooLong},
		{name: "empty bulks", in: "*3\r\n$0\r\n\r\n$-0\r\n\r\n$\r\n\r\n", want: []string{fmt.Sprintf("%q %q",
			"*3\r\n$0\r\n\r\n$-0\r\n\r\n$\r\n\r\n", [][]byte{{}, {}, {}})}},
		{name: "inline at limit", in: x(15) + " " + x(16) + "\r\n", want: guardArgs([]string{x(15), x(16)})},
		{name: "inline at limit without CR", in: x(15) + " " + x(16) + "\n", want: guardArgs([]string{x(15), x(16)})},
		{name: "inline at limit ending in CR", in: x(15) + " " + x(15) + "\r\r\n", want: guardArgs([]string{x(15), x(15) + "\r"})},
		{name: "inline over limit", in: x(16) + " " + x(16) + "\r\n", err: resp.ErrInlineTooLong},
		{name: "inline over limit without CR", in: x(16) + " " + x(16) + "\n", err: resp.ErrInlineTooLong},
		{name: "inline over limit without LF", in: x(15) + " " + x(16) + "\rx", err: resp.ErrInlineTooLong},
		// redcon allocates the rest of the line for each inline word: 8 words of 8 bytes would cost 8*8*... > 64.
		{name: "inline with many spaces", in: "a b c d e f g h\r\n", err: resp.ErrInlineTooLong},
		{name: "inline with few spaces", in: "a b c\r\n", want: guardArgs([]string{"a", "b", "c"})},
		{name: "empty lines", in: "\r\n\n  \r\nPING\r\n", want: guardArgs([]string{"PING"})},
		{
			name: "commands before the offending frame",
			in:   "PING\r\n" + guardFrame("GET", "k") + "\r\n" + guardFrame(x(17)) + guardFrame("PING"),
			want: guardArgs([]string{"PING"}, []string{"GET", "k"}), err: resp.ErrBulkTooLong,
		},
	}
	for _, tt := range tests {
		lim := tt.lim
		if lim == (resp.Limits{}) {
			lim = guardTestLimits
		}
		reply := tt.reply
		if reply == "" && tt.err != nil {
			reply = limitReply[tt.err]
		}
		for how, chunks := range guardChunkings([]byte(tt.in)) {
			res := guardRun(lim, chunks, true)
			if strings.Join(res.cmds, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("%s, %s: commands\n%v\nwant\n%v", tt.name, how, res.cmds, tt.want)
			}
			switch {
			case tt.err == nil && res.err != io.EOF:
				t.Errorf("%s, %s: error %v, want EOF", tt.name, how, res.err)
			case tt.err != nil && !errors.Is(res.err, tt.err):
				t.Errorf("%s, %s: error %v, want %v", tt.name, how, res.err, tt.err)
			}
			if res.reply != reply {
				t.Errorf("%s, %s: wrote %q, want %q", tt.name, how, res.reply, reply)
			}
		}
	}
}

// TestGuardMalformed checks that input redcon rejects reaches redcon, which
// replies with its own error, and that nothing after it gets through.
func TestGuardMalformed(t *testing.T) {
	oversize := guardFrame(strings.Repeat("x", 100))
	tests := []struct {
		in, err string
	}{
		{"*1\r\n$x\r\n", "Protocol error: invalid bulk length"},
		{"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"},
		{"*1\r\n$1\n", "Protocol error: invalid bulk length"},
		{"*1\r\n$1\r\nab\r\n", "Protocol error: invalid bulk length"},
		{"*1\r\n$1\r\na\n\n", "Protocol error: invalid bulk length"},
		{"*0\r\n", "Protocol error: invalid multibulk length"},
		{"*-1\r\n", "Protocol error: invalid multibulk length"},
		{"*-0\r\n", "Protocol error: invalid multibulk length"},
		{"*\r\n", "Protocol error: invalid multibulk length"},
		{"*1\r\r\n", "Protocol error: invalid multibulk length"},
		{"*1\n", "Protocol error: invalid multibulk length"},
		{"*1\r\n:1\r\n", "Protocol error: expected '$', got ':'"},
		{"a\"b\"\r\n", "Protocol error: unbalanced quotes in request"},
		{"\"a\"b\r\n", "Protocol error: unbalanced quotes in request"},
		{"\"a\r\n", "Protocol error: unbalanced quotes in request"},
	}
	for _, tt := range tests {
		in := tt.in + oversize
		for how, chunks := range guardChunkings([]byte(in)) {
			res := guardRun(resp.Limits{MaxBulk: 10}, chunks, true)
			if len(res.cmds) > 0 || res.err == nil || res.err.Error() != tt.err || res.reply != "" {
				t.Errorf("%q, %s: got %v, %v, wrote %q; want only error %q", tt.in, how, res.cmds, res.err, res.reply, tt.err)
			}
			if res.read > len(tt.in) && tt.in[0] == '*' { // an inline line is framed at its '\n' only
				t.Errorf("%q, %s: %d bytes got through, want at most %d", tt.in, how, res.read, len(tt.in))
			}
		}
	}
}

// TestGuardRead checks the Read contract without redcon: the Read that meets
// the offending frame returns the bytes before it, the next writes the reply
// once and fails, and every later Read fails the same way.
func TestGuardRead(t *testing.T) {
	good := "PING\r\n" + guardFrame("SET", "k", "v")
	conn := &guardConn{chunks: [][]byte{[]byte(good + guardFrame(strings.Repeat("x", 17)) + "PING\r\n")}}
	g := resp.Guard(conn, guardTestLimits)
	buf := make([]byte, 1024)
	n, err := g.Read(buf)
	if err != nil || string(buf[:n]) != good {
		t.Fatalf("first Read = %q, %v; want %q, nil", buf[:n], err, good)
	}
	for i := range 3 {
		n, err = g.Read(buf)
		var le *resp.LimitError
		if n != 0 || !errors.As(err, &le) || !errors.Is(err, resp.ErrBulkTooLong) || le.Limit != 16 || le.Got != 17 {
			t.Fatalf("Read %d = %d, %v; want 0, bulk length 17 over 16", i+2, n, err)
		}
	}
	if want := "-ERR Protocol error: invalid bulk length\r\n"; conn.out.String() != want || conn.writes != 1 {
		t.Errorf("wrote %q in %d writes, want %q once", conn.out.String(), conn.writes, want)
	}
	if want := "resp: bulk string longer than the limit: 17 > 16"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestGuardWithDefaults(t *testing.T) {
	got := resp.Limits{MaxArgs: 7, MaxInline: -1}.WithDefaults()
	want := resp.Limits{MaxBulk: 1 << 20, MaxArgs: 7, MaxInline: 64 << 10, MaxRequest: 4 << 20, MaxBuffered: 256 << 20, AuthTimeout: 10 * time.Second}
	if got != want {
		t.Errorf("WithDefaults() = %+v, want %+v", got, want)
	}
}

// guardServer serves PING on a free loopback port behind GuardListener. The
// close callback's errors arrive on the returned channel; stop shuts the
// server down and waits for it.
func guardServer(t *testing.T, lim resp.Limits) (addr string, closed <-chan error, stop func()) {
	t.Helper()
	errs := make(chan error, 16)
	srv := redcon.NewServerNetwork("tcp", "127.0.0.1:0",
		func(conn redcon.Conn, cmd redcon.Command) {
			if strings.EqualFold(string(cmd.Args[0]), "PING") {
				conn.WriteString("PONG")
				return
			}
			conn.WriteError("ERR unknown command")
		},
		nil,
		func(_ redcon.Conn, err error) {
			select {
			case errs <- err:
			default:
			}
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(resp.GuardListener(ln, lim)) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = srv.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), errs, stop
}

// guardPing sends PING on c and wants +PONG back.
func guardPing(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING: got %q, %v; want +PONG", line, err)
	}
}

func guardHeapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestGuardServer streams a 100 MB bulk string at a real redcon server: the
// client gets its PONG, then the error, then the connection closes, while the
// server's heap stays small and another client keeps being served.
func TestGuardServer(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	addr, closed, stop := guardServer(t, resp.Limits{})

	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherR := bufio.NewReader(other)
	guardPing(t, other, otherR)

	runtime.GC()
	heap := guardHeapInuse()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	replies := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(c) // ends with EOF or a reset once the server closes
		replies <- string(b)
	}()

	const total = 100 << 20
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	streamed, maxHeap := 0, heap
	_, err = io.WriteString(c, "PING\r\n*1\r\n$100000000\r\n")
	for i := 0; err == nil && streamed < total; i++ {
		var n int
		n, err = c.Write(chunk)
		streamed += n
		if i%64 == 0 {
			maxHeap = max(maxHeap, guardHeapInuse())
			guardPing(t, other, otherR)
		}
	}
	maxHeap = max(maxHeap, guardHeapInuse())
	if err == nil {
		t.Errorf("the server accepted all %d bytes of the bulk string", streamed)
	}
	t.Logf("streamed %d bytes before the write failed: %v; heap in use %d -> max %d", streamed, err, heap, maxHeap)
	if grown := int64(maxHeap) - int64(heap); grown > 16<<20 {
		t.Errorf("heap in use grew by %d bytes while the client streamed", grown)
	}

	want := "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"
	select {
	case got := <-replies:
		if got != want {
			t.Errorf("client got %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not close")
	}
	select {
	case err := <-closed:
		var le *resp.LimitError
		if !errors.As(err, &le) || !errors.Is(err, resp.ErrBulkTooLong) || le.Limit != 1<<20 {
			t.Errorf("close callback got %v, want a bulk length over %d", err, 1<<20)
		}
	case <-time.After(5 * time.Second):
		t.Error("the close callback did not run")
	}
	guardPing(t, other, otherR)

	other.Close()
	c.Close()
	stop()
	guardNoLeak(t, goroutines)
}

// guardNoLeak waits until no more goroutines run than before the test.
func guardNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// guardBenchConn serves the same bytes on every pass.
type guardBenchConn struct {
	guardConn
	data []byte
	rest []byte
}

func (c *guardBenchConn) Read(p []byte) (int, error) {
	if len(c.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

// BenchmarkGuard reads a pipeline of 1000 SET commands, with and without the
// guard: "read" with plain 4 KiB Reads, "redcon" through redcon's Reader.
func BenchmarkGuard(b *testing.B) {
	data := []byte(strings.Repeat(guardFrame("SET", "k", "v", "NX", "PX", "30000"), 1000))
	conn := &guardBenchConn{data: data}
	for _, guarded := range []bool{false, true} {
		name := "plain"
		if guarded {
			name = "guard"
		}
		open := func() net.Conn {
			conn.rest = conn.data
			if guarded {
				return resp.Guard(conn, resp.Limits{})
			}
			return conn
		}
		b.Run("read/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			buf := make([]byte, 4096)
			for b.Loop() {
				c := open()
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
			}
		})
		b.Run("redcon/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				rd := redcon.NewReader(open())
				for {
					if _, err := rd.ReadCommands(); err != nil {
						break
					}
				}
			}
		})
	}
}

// guardReadCounter counts the Reads made through it.
type guardReadCounter struct {
	r     io.Reader
	reads int
}

func (c *guardReadCounter) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// TestGuardReadsWholeCommands: redcon parses its whole buffer again, and
// recurses, after every Read that completes no command. Sent a byte at a
// time, a 100 kB command must still reach redcon in a few Reads (its buffer
// doubling), not one per byte.
func TestGuardReadsWholeCommands(t *testing.T) {
	data := []byte(guardFrame("ECHO", strings.Repeat("x", 100000)) + "PING\r\n")
	var chunks [][]byte
	for i := range data {
		chunks = append(chunks, data[i:i+1])
	}
	rc := &guardReadCounter{r: resp.Guard(&guardConn{chunks: chunks}, resp.Limits{})}
	rd := redcon.NewReader(rc)
	var got int
	for {
		cmds, err := rd.ReadCommands()
		got += len(cmds)
		if err != nil {
			break
		}
	}
	if got != 2 || rc.reads > 16 {
		t.Fatalf("%d commands in %d Reads, want 2 in at most 16", got, rc.reads)
	}
}
