package instance_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/tlstest"
)

// Attacks on the shared connection's reply path (resp.Sink): the reader
// of a shared upstream connection writes each reply straight to its
// client, and the client's own goroutine orders what it writes itself
// (lock commands, PING, CLIENT REPLY, transactions, blocking commands,
// pub/sub) after the replies expected before it.

// TestPassthroughSinkOrderMixedPipeline: one write mixing forwarded
// commands with commands lockproxy answers itself (LOCK, UNLOCK, PING,
// CLIENT REPLY ON), CLIENT REPLY SKIP and OFF, a transaction, a blocking
// pop and SUBSCRIBE (other upstream connections) gets every reply in the
// order of the commands, none of the silenced ones.
func TestPassthroughSinkOrderMixedPipeline(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	runMixedPipeline(t, 2, func() *rawConn { return dialRaw(t, p.in.Addr()) })
}

// TestPassthroughSinkOrderMixedPipelineRESP3 is the mixed pipeline on a
// RESP3 connection (its own shared upstream connections).
func TestPassthroughSinkOrderMixedPipelineRESP3(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	runMixedPipeline(t, 3, func() *rawConn { return dialProto(t, p.in.Addr(), 3) })
}

// TestPassthroughSinkOrderMixedPipelineTLS is the mixed pipeline over TLS,
// whose socket the sink cannot write without blocking: every burst of
// replies goes through the sink's own goroutine.
func TestPassthroughSinkOrderMixedPipelineTLS(t *testing.T) {
	runMixedPipeline(t, 2, passthroughTLS(t))
}

func runMixedPipeline(t *testing.T, proto int, dial func() *rawConn) {
	for i := range 5 {
		k := uniqueKey(t) + strconv.Itoa(i)
		lk, q := "lock:"+k, k+":q"
		steps := []struct {
			cmd  []string
			want string // "" silenced; a trailing * a prefix
		}{
			{[]string{"SET", k, "1"}, "+OK"},
			{[]string{"LOCK", lk, "PX", "5000"}, "[*"},
			{[]string{"INCR", k}, ":2"},
			{[]string{"PING"}, "+PONG"},
			{[]string{"CLIENT", "REPLY", "SKIP"}, ""},
			{[]string{"INCR", k}, ""},
			{[]string{"GET", k}, "3"},
			{[]string{"CLIENT", "REPLY", "OFF"}, ""},
			{[]string{"INCR", k}, ""},
			{[]string{"PING"}, ""},
			{[]string{"LOCK", lk + ":2", "PX", "5000"}, ""},
			{[]string{"CLIENT", "REPLY", "ON"}, "+OK"},
			{[]string{"GET", k}, "4"},
			{[]string{"MULTI"}, "+OK"},
			{[]string{"INCR", k}, "+QUEUED"},
			{[]string{"GET", k}, "+QUEUED"},
			{[]string{"EXEC"}, "[:5 5]"},
			{[]string{"RPUSH", q, "a"}, ":1"},
			{[]string{"INCR", k}, ":6"},
			{[]string{"BLPOP", q, "1"}, "[" + q + " a]"},
			{[]string{"INCR", k}, ":7"},
			{[]string{"UNLOCK", lk, "not-the-token"}, "*"},
			{[]string{"GET", k}, "7"},
			{[]string{"SUBSCRIBE", k + ":ch"}, "[subscribe " + k + ":ch :1]"},
			{[]string{"PING"}, "[pong ]"},
		}
		if proto == 3 { // the confirmation is a push, and PING is answered as outside pub/sub
			steps[len(steps)-2].want = ">" + steps[len(steps)-2].want
			steps[len(steps)-1].want = "+PONG"
		}
		c := dial()
		var b strings.Builder
		for _, s := range steps {
			b.WriteString(encodeCommand(s.cmd))
		}
		c.send(b.String())
		for j, s := range steps {
			if s.want == "" {
				continue
			}
			got := c.reply()
			if pre, ok := strings.CutSuffix(s.want, "*"); ok && strings.HasPrefix(got, pre) {
				continue
			}
			if got != s.want {
				t.Fatalf("round %d, step %d %v: %q, want %q", i, j, s.cmd, got, s.want)
			}
		}
		c.c.Close()
	}
}

// TestPassthroughSinkQuitAfterReplyOff: QUIT (or any close) while CLIENT
// REPLY OFF holds still writes the replies of the forwarded commands
// before it, as Redis does, though QUIT's own reply is silenced.
func TestPassthroughSinkQuitAfterReplyOff(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	for i := range 20 {
		k := uniqueKey(t) + strconv.Itoa(i)
		c := dialRaw(t, p.in.Addr())
		c.send(encodeCommand([]string{"INCR", k}) + encodeCommand([]string{"GET", k}) +
			encodeCommand([]string{"CLIENT", "REPLY", "OFF"}) + encodeCommand([]string{"QUIT"}))
		_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		all, err := io.ReadAll(c.rd)
		if err != nil || string(all) != ":1\r\n$1\r\n1\r\n" {
			t.Fatalf("round %d: %q, %v; want the INCR's and the GET's replies, then the close", i, all, err)
		}
	}
}

// TestPassthroughSinkUpstreamBreaks: the shared upstream connection breaks
// (CLIENT KILL on the data Redis) while two clients' replies are expected
// on it (the data Redis holds their writes: CLIENT PAUSE WRITE): each
// expected reply becomes one error, in its place among the replies
// lockproxy writes itself (after them), none lost or doubled, and both clients' next
// commands are answered.
func TestPassthroughSinkUpstreamBreaks(t *testing.T) {
	// The calls wait as long as the pause: only the kill ends them.
	const pause = 20 * time.Second
	p := startPassthroughWith(t, func(cfg *instance.Config) { cfg.Passthrough.TimeoutMS = int(pause.Milliseconds()) }, "lock:*")
	a, b := sameSharedConn(t, p.in.Addr())
	k := uniqueKey(t)
	ctx := context.Background()
	data := newClient(t, p.data.Addr(), 2)
	// unread is what the data Redis holds of its clients' commands, but
	// the one asking: behind a paused command, the rest of its
	// connection's pipeline.
	unread := func() int {
		sum := 0
		for _, line := range strings.Split(data.ClientList(ctx).Val(), "\n") {
			if strings.Contains(line, " cmd=client|list ") {
				continue
			}
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "qbuf="); ok {
					n, _ := strconv.Atoi(v)
					sum += n
				}
			}
		}
		return sum
	}
	// Both clients' shared connection is dialled before the pause.
	if a.do("GET", k) != "(nil)" || b.do("GET", k) != "(nil)" {
		t.Fatal("GET before the pause")
	}
	if err := data.Do(ctx, "CLIENT", "PAUSE", strconv.Itoa(int(pause.Milliseconds())), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Do(context.Background(), "CLIENT", "UNPAUSE") })
	const n = 40
	var wa, wb strings.Builder
	var wantA []string
	for range n {
		wa.WriteString(encodeCommand([]string{"INCR", k}))
		wantA = append(wantA, "-")
		wb.WriteString(encodeCommand([]string{"INCR", k + ":b"}))
	}
	// What lockproxy answers itself waits for the replies before it, and
	// holds the commands behind it meanwhile: it goes last.
	wa.WriteString(encodeCommand([]string{"PING"}) + encodeCommand([]string{"LOCK", "lock:" + k, "PX", "5000"}))
	wantA = append(wantA, "+PONG", "[")
	a.send(wa.String())
	b.send(wb.String())
	// Every INCR is on the shared connection before it breaks (one sent
	// after would go on a new one, which the pause holds): the data Redis
	// holds all but the first, paused one (with one INCR fewer it would
	// hold less than this, the longer one's length being the shorter's plus
	// two). Within half the pause, for the kill to come while it holds.
	incA, incB := len(encodeCommand([]string{"INCR", k})), len(encodeCommand([]string{"INCR", k + ":b"}))
	eventually(t, pause/2, "both pipelines on the shared connection", func() bool { return unread() >= n*(incA+incB)-incB })
	if err := data.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	for i, w := range wantA {
		got := a.reply()
		if !strings.HasPrefix(got, w) || w == "+PONG" && got != w {
			t.Fatalf("A's reply %d: %q, want %q", i, got, w)
		}
	}
	for i := range n {
		if got := b.reply(); !strings.HasPrefix(got, "-") {
			t.Fatalf("B's reply %d: %q, want an error", i, got)
		}
	}
	if err := data.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	// None of the paused writes ran; the next ones do, one reply each.
	if got := a.do("INCR", k); got != ":1" {
		t.Fatalf("A's INCR after the break: %q, want :1", got)
	}
	if got := b.do("INCR", k+":b"); got != ":1" {
		t.Fatalf("B's INCR after the break: %q, want :1", got)
	}
	if got := a.do("PING"); got != "+PONG" {
		t.Fatalf("A's PING after: %q", got)
	}
	_ = a.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if extra, err := a.rd.ReadByte(); err == nil {
		t.Fatalf("A got a byte more: %q", extra)
	}
}

// goroutines are the goroutines whose stack names fn ("" for all), by id,
// with their state ("IO wait", "chan receive", ...). A test finds its own
// among them by id: a goroutine of an earlier test's instance may still be
// on its way out, and a sink's rest-writer may still be leaving after its
// client read the reply it wrote.
func goroutines(fn string) map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	gs := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, fn) {
			continue
		}
		head, _, _ := strings.Cut(g, "\n") // goroutine 18 [IO wait, 2 minutes]:
		id, state, ok := strings.Cut(strings.TrimPrefix(head, "goroutine "), " [")
		if !ok {
			continue
		}
		state, _, _ = strings.Cut(state, "]")
		state, _, _ = strings.Cut(state, ",")
		gs[id] = state
	}
	return gs
}

// newGoroutines are the ids of the goroutines in fn that are not among
// before, those in state only unless it is "".
func newGoroutines(fn, state string, before map[string]string) []string {
	var ids []string
	for id, st := range goroutines(fn) {
		if _, ok := before[id]; !ok && (state == "" || st == state) {
			ids = append(ids, id)
		}
	}
	return ids
}

// ended reports whether none of the goroutines ids runs any more.
func ended(ids []string) bool {
	all := goroutines("")
	for _, id := range ids {
		if _, ok := all[id]; ok {
			return false
		}
	}
	return true
}

// sinkWriter is the goroutine that writes the rest of a sink's replies.
const sinkWriter = "resp.(*Sink).writeRest"

// TestPassthroughSinkClientGoneWhileWriting: a client that reads none of
// its large replies is killed (CLIENT KILL from another client), or closes
// its socket, while its sink's goroutine is blocked writing them: that
// goroutine ends, and a client sharing the upstream connection goes on.
func TestPassthroughSinkClientGoneWhileWriting(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	runClientGone(t, func() *rawConn { return dialRaw(t, p.in.Addr()) })
}

// TestPassthroughSinkClientGoneWhileWritingTLS is the same over TLS.
func TestPassthroughSinkClientGoneWhileWritingTLS(t *testing.T) {
	runClientGone(t, passthroughTLS(t))
}

// passthroughTLS starts a passthrough instance (lock keys lock:*) that
// clients reach over TLS, and returns how to dial it raw.
func passthroughTLS(t *testing.T) func() *rawConn {
	ca := tlstest.NewCA(t, "test")
	srvFiles := ca.Server(t, "server")
	p := startPassthroughWith(t, func(cfg *instance.Config) {
		cfg.TLS = instance.TLSConfig{CertFile: srvFiles.Cert, KeyFile: srvFiles.Key}
	}, "lock:*")
	return func() *rawConn { return dialTLSRaw(t, ca, p.in.Addr()) }
}

func dialTLSRaw(t *testing.T, ca *tlstest.CA, addr string) *rawConn {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, clientTLS(t, ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// sameSharedConnDial is sameSharedConn for clients dial makes.
func sameSharedConnDial(t *testing.T, dial func() *rawConn) (*rawConn, *rawConn) {
	a := dial()
	idA, _ := strconv.Atoi(strings.TrimPrefix(a.do("CLIENT", "ID"), ":"))
	n := runtime.GOMAXPROCS(0)
	for range 4 * n {
		b := dial()
		idB, _ := strconv.Atoi(strings.TrimPrefix(b.do("CLIENT", "ID"), ":"))
		if idA%n == idB%n {
			return a, b
		}
	}
	t.Fatal("no two clients on one shared connection")
	return nil, nil
}

func runClientGone(t *testing.T, dial func() *rawConn) {
	const n, size = 300, 64 << 10
	k := uniqueKey(t)
	setup := dial()
	if got := setup.do("SET", k, strings.Repeat("v", size)); got != "+OK" {
		t.Fatalf("SET: %q", got)
	}
	for round, how := range []string{"kill", "close"} {
		slow, other := sameSharedConnDial(t, dial)
		id := strings.TrimPrefix(slow.do("CLIENT", "ID"), ":")
		var w strings.Builder
		for range n {
			w.WriteString("GET " + k + "\r\n")
		}
		before := goroutines(sinkWriter)
		slow.send(w.String())
		// Its rest-writer blocks in its socket's write once the sockets
		// hold what they take (the server's send buffer, at most tcp_wmem's
		// 4 MiB, and the client's receive buffer, which grows only as it
		// reads): a few of the 19 MiB of replies. No timeout is involved:
		// the bound is that work on a loaded machine.
		var writers []string
		eventually(t, 10*time.Second, "the slow client's rest-writer blocked", func() bool {
			writers = newGoroutines(sinkWriter, "IO wait", before)
			return len(writers) > 0
		})
		if how == "kill" {
			if got := other.do("CLIENT", "KILL", "ID", id); got != ":1" {
				t.Fatalf("CLIENT KILL: %q", got)
			}
		} else {
			slow.c.Close()
		}
		for i := range 20 {
			if got := other.do("INCR", k+":n"); got != ":"+strconv.Itoa(round*20+i+1) {
				t.Fatalf("%s: the other's INCR %d: %q", how, i, got)
			}
		}
		// The write fails at once: the server closed the socket (kill), or
		// the client reset it (a close with unread replies).
		eventually(t, 10*time.Second, how+": the rest-writer ended", func() bool { return ended(writers) })
		if how == "kill" {
			// What the socket held is delivered, then the close (a reset if
			// lockproxy had not read all the commands). Over TLS the close
			// has no close_notify: it broke the write in flight, and
			// crypto/tls sends none then (it would wait for the full socket).
			_, isTLS := slow.c.(*tls.Conn)
			_ = slow.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			m, err := io.Copy(io.Discard, bufio.NewReader(slow.c))
			if err != nil && !strings.Contains(err.Error(), "reset") && !(isTLS && errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Fatalf("the killed client's socket, after %d bytes: %v", m, err)
			}
		}
		other.c.Close()
	}
}

// TestPassthroughSinkLimitBrokenWhileRepliesExpected: a command past the
// bulk limit, pipelined behind forwarded commands whose replies are held up
// (another client's busy script runs first on their shared connection),
// is refused only after their replies, each once; then the connection
// closes; the other client gets its reply.
func TestPassthroughSinkLimitBrokenWhileRepliesExpected(t *testing.T) {
	p := startPassthroughWith(t, func(cfg *instance.Config) { cfg.Passthrough.TimeoutMS = 10000 }, "lock:*")
	for round := range 3 {
		a, b := sameSharedConn(t, p.in.Addr())
		k := uniqueKey(t) + strconv.Itoa(round)
		b.send(encodeCommand(busyEval(300 * time.Millisecond)))
		time.Sleep(20 * time.Millisecond) // B's script goes first (if not, A's replies are merely sooner)
		var w strings.Builder
		want := ""
		for i := range 50 {
			w.WriteString(encodeCommand([]string{"INCR", k}))
			want += ":" + strconv.Itoa(i+1) + "\r\n"
		}
		w.WriteString("*2\r\n$3\r\nGET\r\n$999999999\r\n")
		a.send(w.String())
		_ = a.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		all, err := io.ReadAll(a.rd)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("round %d: %v after %q", round, err, all)
		}
		got, rest := string(all), ""
		if len(got) >= len(want) {
			got, rest = got[:len(want)], got[len(want):]
		}
		if got != want || !strings.HasPrefix(rest, "-ERR Protocol error") || strings.Count(rest, "\r\n") != 1 {
			t.Fatalf("round %d: %q, want the 50 INCR replies, then the protocol error, then the close", round, all)
		}
		if got := b.reply(); got != ":1" {
			t.Fatalf("round %d: B's script: %q", round, got)
		}
	}
}

// TestPassthroughSinkCountLimitNotReading: a client that reads none of
// its replies, small enough that 256 in flight stay under the 1 MiB
// backlog (the count limit holds it, not the bytes), does not hold up a
// client sharing its upstream connection; it then gets every reply, in
// order.
func TestPassthroughSinkCountLimitNotReading(t *testing.T) {
	const n, size = 8000, 3000 // 24 MB: more than the sockets hold
	p := startPassthrough(t, "lock:*")
	k := uniqueKey(t)
	if err := newClient(t, p.in.Addr(), 2).Set(context.Background(), k, strings.Repeat("v", size), 0).Err(); err != nil {
		t.Fatal(err)
	}
	slow, other := sameSharedConn(t, p.in.Addr())
	var w strings.Builder
	for i := range n {
		w.WriteString(encodeCommand([]string{"APPEND", k + ":" + strconv.Itoa(i%7), "x"}))
		w.WriteString(encodeCommand([]string{"GET", k}))
	}
	before := goroutines(sinkWriter)
	go func() { _, _ = io.WriteString(slow.c, w.String()) }() // the write itself blocks once the client waits
	// As in runClientGone: a few MiB of replies fill the sockets.
	eventually(t, 10*time.Second, "the slow client's rest-writer blocked", func() bool {
		return len(newGoroutines(sinkWriter, "IO wait", before)) > 0
	})
	for i := range 50 {
		if got := other.do("INCR", k+":n"); got != ":"+strconv.Itoa(i+1) {
			t.Fatalf("the other's INCR %d: %q", i, got)
		}
	}
	appended := make([]int, 7)
	for i := range n {
		appended[i%7]++
		if got := slow.reply(); got != ":"+strconv.Itoa(appended[i%7]) {
			t.Fatalf("APPEND %d: %q", i, got)
		}
		if got := slow.reply(); len(got) != size {
			t.Fatalf("GET %d: %d bytes", i, len(got))
		}
	}
}

// TestPassthroughSinkKilledWhileHeldByLimit: a client held at the
// 256-command limit by replies the data Redis does not give (CLIENT PAUSE
// WRITE) is killed: its socket closes at once, and its goroutine, waiting
// for those replies, ends within the passthrough timeout's bounds (each
// unanswered call fails), not when the data Redis resumes.
func TestPassthroughSinkKilledWhileHeldByLimit(t *testing.T) {
	const timeout, pause = 500 * time.Millisecond, 60 * time.Second
	p := startPassthroughWith(t, func(cfg *instance.Config) { cfg.Passthrough.TimeoutMS = int(timeout.Milliseconds()) }, "lock:*")
	ctx := context.Background()
	data := newClient(t, p.data.Addr(), 2)
	k := uniqueKey(t)
	slow, other := sameSharedConn(t, p.in.Addr())
	id := strings.TrimPrefix(slow.do("CLIENT", "ID"), ":")
	if slow.do("GET", k) != "(nil)" {
		t.Fatal("GET before the pause")
	}
	const waiting = "resp.(*Sink).Wait"
	before := goroutines(waiting)
	if err := data.Do(ctx, "CLIENT", "PAUSE", strconv.Itoa(int(pause.Milliseconds())), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Do(context.Background(), "CLIENT", "UNPAUSE") })
	var w strings.Builder
	for range 600 {
		w.WriteString(encodeCommand([]string{"INCR", k}))
	}
	slow.send(w.String())
	var held []string
	eventually(t, 10*time.Second, "the client held at the limit", func() bool {
		held = newGoroutines(waiting, "", before)
		return len(held) > 0
	})
	if got := other.do("CLIENT", "KILL", "ID", id); got != ":1" {
		t.Fatalf("CLIENT KILL: %q", got)
	}
	_ = slow.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := slow.rd.ReadByte(); err != io.EOF && (err == nil || !strings.Contains(err.Error(), "reset")) {
		t.Fatalf("the killed client's socket: %q, %v; want it closed", b, err) // reset: it held unread commands
	}
	// The calls it waits for fail once the first is timeout late and its
	// late reply as long again (each with an eighth to spare): about a
	// second. A goroutine that waited for the data Redis would end only
	// with the pause; half of it tells the two apart on a loaded machine.
	eventually(t, pause/2, "the killed client's goroutine ended", func() bool { return ended(held) })
	if err := data.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if got := other.do("PING"); got != "+PONG" {
		t.Fatalf("the other's PING: %q", got)
	}
	if got := other.do("INCR", k+":o"); got != ":1" {
		t.Fatalf("the other's INCR after: %q", got)
	}
}
