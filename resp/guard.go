package resp

import (
	"bytes"
	"crypto/tls"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what clients may send. Zero fields take the defaults, except
// IdleTimeout, where zero means no timeout.
type Limits struct {
	MaxBulk     int           // longest bulk string in bytes (default 1 MiB)
	MaxArgs     int           // most arguments in one command (default 4096)
	MaxInline   int           // longest inline (telnet-style) line in bytes, "\r\n" excluded (default 64 KiB, as Redis)
	MaxRequest  int           // most bytes buffered for one connection's next command (default 4 MiB)
	MaxBuffered int           // most bytes buffered for all connections together (default 256 MiB)
	AuthTimeout time.Duration // a connection not authenticated by then is closed, when a password is set (default 10s)
	IdleTimeout time.Duration // a connection that sends nothing for that long, unless a command of its own blocks, is closed (0: never)
}

const (
	defaultMaxBulk     = 1 << 20
	defaultMaxArgs     = 4096
	defaultMaxInline   = 64 << 10
	defaultMaxRequest  = 4 << 20
	defaultMaxBuffered = 256 << 20
	defaultAuthTimeout = 10 * time.Second

	// What a client that has not authenticated may send, as Redis allows.
	unauthMaxArgs = 10
	unauthMaxBulk = 16384

	// maxHeader is the longest "*N" or "$LEN" header line, in bytes before its '\n'.
	maxHeader = 32

	// guardReplyTimeout bounds the write of the error reply to a client that does not read.
	guardReplyTimeout = time.Second
)

// Redis's replies to the limit errors.
const (
	replyBulkTooLong     = "-ERR Protocol error: invalid bulk length\r\n"
	replyTooManyArgs     = "-ERR Protocol error: invalid multibulk length\r\n"
	replyUnauthBulk      = "-ERR Protocol error: unauthenticated bulk length\r\n"
	replyUnauthArgs      = "-ERR Protocol error: unauthenticated multibulk length\r\n"
	replyInlineTooLong   = "-ERR Protocol error: too big inline request\r\n"
	replyRequestTooLong  = "-ERR Protocol error: too big request\r\n"
	replyCountTooLong    = "-ERR Protocol error: too big mbulk count string\r\n"
	replyLengthTooLong   = "-ERR Protocol error: too big bulk count string\r\n"
	replyBufferedTooMuch = "-ERR max buffered bytes of all clients reached\r\n"
)

// WithDefaults returns l with every zero or negative field set to its
// default (IdleTimeout to 0) and every size capped so that sums cannot overflow.
func (l Limits) WithDefaults() Limits {
	l.MaxBulk = limitOr(l.MaxBulk, defaultMaxBulk)
	l.MaxArgs = limitOr(l.MaxArgs, defaultMaxArgs)
	l.MaxInline = limitOr(l.MaxInline, defaultMaxInline)
	l.MaxRequest = limitOr(l.MaxRequest, defaultMaxRequest)
	l.MaxBuffered = limitOr(l.MaxBuffered, defaultMaxBuffered)
	if l.AuthTimeout <= 0 {
		l.AuthTimeout = defaultAuthTimeout
	}
	l.IdleTimeout = max(l.IdleTimeout, 0)
	return l
}

func limitOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return min(v, math.MaxInt32)
}

// unauthenticated returns the limits for a client that has not authenticated.
func (l Limits) unauthenticated() Limits {
	l.MaxArgs = min(l.MaxArgs, unauthMaxArgs)
	l.MaxBulk = min(l.MaxBulk, unauthMaxBulk)
	return l
}

// budget counts the bytes buffered for all the connections of a listener.
type budget struct {
	max     atomic.Int64
	used    atomic.Int64
	reclaim reclaimer
}

func newBudget(max int) *budget {
	b := &budget{}
	b.max.Store(int64(max))
	return b
}

// take reserves n bytes, or nothing and reports false if that would pass max.
func (b *budget) take(n int) bool {
	if b.used.Add(int64(n)) > b.max.Load() {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

func (b *budget) give(n int) { b.used.Add(-int64(n)) }

// Guard wraps c so that its Read refuses a client's byte stream once it
// breaks a limit, before redcon buffers it; each listener of GuardListener
// shares one budget of MaxBuffered bytes, and a lone Guard has its own.
//
// redcon keeps every byte of an incomplete command, parses the whole buffer
// again after each Read and recurses once per Read. So Guard follows the
// command framing (a "*N" header and N "$LEN" bulk strings, or an inline line
// ending at '\n') and:
//   - reads on until a command is complete or p is full, so redcon parses a
//     command only a few times however the client splits it;
//   - refuses a command whose bytes so far pass MaxRequest (MaxInline for an
//     inline line), or the MaxBuffered budget, which counts the bytes of
//     every connection's incomplete command;
//   - checks the "*N" and "$LEN" headers against MaxArgs and MaxBulk, as
//     redcon's bugs require (see header);
//   - before the client authenticates, returns one command per Read, so that
//     the next is checked against the unauthenticated limits (10 arguments,
//     16384-byte strings, as Redis) only while AUTH has not run.
//
// The Read that meets a command breaking a limit returns the bytes before
// it; the next Read writes Redis's error reply to c, waiting at most a
// second, and returns a *LimitError, as does every Read after it. Input
// redcon rejects as malformed is passed through up to the byte where redcon
// rejects it, and redcon replies; every Read after it returns ErrMalformedRequest.
//
// Read must not be called concurrently.
func Guard(c net.Conn, lim Limits) net.Conn {
	src := fixedLimits(lim)
	return newGuard(c, src, newBudget(src.Load().MaxBuffered))
}

// fixedLimits is a source of limits that never change.
func fixedLimits(lim Limits) *atomic.Pointer[Limits] {
	lim = lim.WithDefaults()
	var src atomic.Pointer[Limits]
	src.Store(&lim)
	return &src
}

func newGuard(c net.Conn, src *atomic.Pointer[Limits], b *budget) *guardConn {
	g := &guardConn{Conn: c, src: src, lim: *src.Load(), budget: b}
	g.authed.Store(true)
	return g
}

// GuardListener wraps every connection ln accepts with Guard; they share
// one MaxBuffered budget.
func GuardListener(ln net.Listener, lim Limits) net.Listener {
	src := fixedLimits(lim)
	return &guardListener{Listener: ln, src: src, budget: newBudget(src.Load().MaxBuffered)}
}

type guardListener struct {
	net.Listener
	src    *atomic.Pointer[Limits] // the limits in force; Server.SetLimits changes them
	budget *budget
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newGuard(c, l.src, l.budget), nil
}

var (
	_ net.Conn     = (*guardConn)(nil)
	_ net.Listener = (*guardListener)(nil)
)

type guardConn struct {
	net.Conn
	src    *atomic.Pointer[Limits] // the limits in force, read at each Read
	lim    Limits                  // src's limits at the start of the current Read
	budget *budget
	authed atomic.Bool // the unauthenticated limits do not apply
	fr     framer      // has framed every byte Read returned
	held   int         // bytes of the incomplete command held from the budget
	room   int         // bytes held from the budget for read-buffer room beyond held (reserve)
	// charged is what g holds from the budget (held and look), or -1 once closed.
	charged atomic.Int64
	err     error  // sticky, returned by every Read once set
	reply   string // Redis's reply to the broken limit, still to be written

	// Bytes read from the socket but not yet returned (a watch's, or those
	// after an unauthenticated client's command), then the error that ended
	// the reading. watch.go reads into them while a command blocks.
	look    []byte
	lookErr error
	watch   *watch

	// wmu serialises writes to the socket: redcon's flush of a batch of
	// replies (one Write) and pushes written from other goroutines, so
	// that a push never lands inside a reply (push.go).
	wmu sync.Mutex
	// pushes are push frames still to be written; pushing is true while
	// a goroutine writes them. pmu guards both.
	pmu     sync.Mutex
	pushes  [][]byte
	pushing bool
	// sink is the connection's Sink, whose replies go before the reply
	// to a broken limit; nil until used.
	sink *Sink
}

// maxKeptEnds bounds the command ends a guard keeps room for between Reads.
const maxKeptEnds = 64

// ends are the offsets in the p of the last Read at which a command ends,
// in order; the bytes after the last one begin a command not yet complete.
func (g *guardConn) ends() []int { return g.fr.ends }

// Write writes b whole before any push can be written.
func (g *guardConn) Write(b []byte) (int, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return g.Conn.Write(b)
}

// Read returns what the client sent, as Guard describes.
func (g *guardConn) Read(p []byte) (int, error) {
	g.fr.ends = g.fr.ends[:0]
	if cap(g.fr.ends) > maxKeptEnds {
		g.fr.ends = nil // a long pipeline's: an idle connection does not keep it
	}
	if g.watch != nil {
		g.watch.stop() // the handler did not
	}
	g.lim = *g.src.Load() // no watch runs: only this goroutine reads g.lim
	if g.err != nil {
		return 0, g.fail()
	}
	n := 0
	for n < len(p) {
		m, rerr := g.peek(p[n:])
		k := len(g.fr.ends)
		used, ended, serr := g.scan(p[n : n+m])
		for j := k; j < len(g.fr.ends); j++ {
			g.fr.ends[j] += n // where in p, not in this piece
		}
		rest := p[n+used : n+m]
		if serr != nil {
			rest = nil // what follows the offending byte is never read
		}
		g.consume(rest, m)
		n += used
		switch {
		case serr != nil:
			g.err = serr
			if n > 0 {
				return n, nil
			}
			return 0, g.fail()
		case rerr != nil:
			if n > 0 { // redcon drops the bytes of a Read that fails
				g.lookErr = rerr
				return n, nil
			}
			return 0, rerr
		case ended:
			return n, nil
		}
	}
	return n, nil
}

// peek copies into p what a watch read, or else reads the socket.
func (g *guardConn) peek(p []byte) (int, error) {
	if len(g.look) > 0 {
		return copy(p, g.look), nil
	}
	if g.lookErr != nil {
		return 0, g.lookErr
	}
	if g.lim.IdleTimeout > 0 {
		_ = g.Conn.SetReadDeadline(time.Now().Add(g.lim.IdleTimeout))
	}
	return g.Conn.Read(p)
}

// consume drops the m bytes peek returned from the lookahead, and keeps
// rest, the part of them not returned, for the next Read.
func (g *guardConn) consume(rest []byte, m int) {
	if len(g.look) > 0 {
		g.look = g.look[m-len(rest):]
		g.hold(len(rest)-m, false)
		if len(g.look) == 0 {
			g.look = nil
		}
		return
	}
	if len(rest) > 0 {
		g.hold(len(rest), false) // the bytes are read: over the budget or not
		g.look = append([]byte(nil), rest...)
	}
}

// scan frames p under the limits in force and holds the bytes of the
// incomplete command from the budget. See framer.scan for the results.
func (g *guardConn) scan(p []byte) (int, bool, error) {
	lim := g.lim
	authed := g.authed.Load()
	if !authed {
		lim = lim.unauthenticated()
	}
	used, ended, err := g.fr.scan(p, &lim, !authed)
	if err != nil {
		g.reply = replyFor(err, g.fr.st, authed)
	}
	grew := g.fr.req - g.held
	fromRoom := min(max(grew, 0), g.room) // bytes read into room already reserved
	g.room -= fromRoom
	if !g.hold(grew-fromRoom, true) {
		return 0, false, g.overBudget()
	}
	g.held = g.fr.req
	return used, ended, err
}

// overBudget ends the connection for want of budget: its bytes go back to
// the others at once, and Redis's reply is written by fail.
func (g *guardConn) overBudget() error {
	g.giveBack()
	g.reply = replyBufferedTooMuch
	return &LimitError{Err: ErrBufferedTooMuch, Limit: g.lim.MaxBuffered, Got: int(g.budget.used.Load())}
}

// reserve holds from the budget what a read buffer of size bytes needs
// beyond what g holds already, before the buffer is made, so that memory
// is budgeted when it is allocated and not only once bytes fill it. If the
// budget has no room, the connection is refused as scan refuses it: every
// Read fails from then on.
func (g *guardConn) reserve(size int) bool {
	need := size - g.held - g.room
	if need <= 0 || g.err != nil {
		return g.err == nil
	}
	if !g.hold(need, true) {
		g.err = g.overBudget()
		return false
	}
	g.room += need
	return true
}

// unreserve gives back the room held for a read buffer that was dropped.
func (g *guardConn) unreserve() {
	if g.room > 0 {
		g.hold(-g.room, false)
		g.room = 0
	}
}

// expected is how many more bytes the command being read is likely to
// need, when the framing gives a clue, else 0: in a bulk string, the rest
// of it and, if more strings are to come, as much again for them (the
// values of a long command are often alike: ECHO's, a list's), within
// MaxRequest. A read buffer of that size is then reserved and allocated,
// so that a long command is read into one or two buffers rather than a
// string of doublings, each the garbage of the next; a command whose
// other strings are short (SET key value NX) reserves at most twice its
// size for the moment it is read.
func (g *guardConn) expected() int {
	if g.fr.st != stData {
		return 0
	}
	rest := g.fr.left + 2
	likely := rest + min((g.fr.args-1)*(g.fr.bulk+2+maxHeader), rest)
	return min(likely, max(g.lim.MaxRequest-g.fr.req, rest))
}

// fail writes the pending reply, once and best effort, and returns the sticky error.
func (g *guardConn) fail() error {
	if g.reply != "" {
		if g.sink != nil {
			g.sink.Wait()
		}
		g.wmu.Lock()
		_ = g.Conn.SetWriteDeadline(time.Now().Add(guardReplyTimeout))
		_, _ = io.WriteString(g.Conn, g.reply)
		g.wmu.Unlock()
		g.reply = ""
	}
	return g.err
}

// hold changes by n bytes what g holds from the budget. With capped, it
// reports false, holding nothing more, if n more bytes would pass the budget.
func (g *guardConn) hold(n int, capped bool) bool {
	if n > 0 && capped && !g.budget.take(n) {
		return false
	}
	if n > 0 && !capped {
		g.budget.used.Add(int64(n))
	}
	for {
		cur := g.charged.Load()
		if cur < 0 { // closed: Close gave back all g held
			g.budget.give(max(n, 0))
			return true
		}
		if g.charged.CompareAndSwap(cur, cur+int64(n)) {
			g.budget.give(max(-n, 0))
			return true
		}
	}
}

// Close closes the connection and gives back what it holds from the
// budget. It may be called from any goroutine, more than once.
func (g *guardConn) Close() error {
	g.giveBack()
	return g.Conn.Close()
}

// Abort closes the connection at once. Over TLS it sends no close_notify
// alert: Go's TLS library waits up to 5 s to write it to a client that
// reads nothing, and the caller (CLIENT KILL, Drop, Server.Close) would wait
// with it.
func (g *guardConn) Abort() error {
	g.giveBack()
	if tc, ok := g.Conn.(*tls.Conn); ok {
		return tc.NetConn().Close()
	}
	return g.Conn.Close()
}

// giveBack returns all g holds from the budget, for good: g is closing.
func (g *guardConn) giveBack() {
	if held := g.charged.Swap(-1); held > 0 {
		g.budget.give(int(held))
	}
}

// replyFor is Redis's reply to a broken limit.
func replyFor(err error, st frameState, authed bool) string {
	le, ok := err.(*LimitError)
	if !ok {
		return "" // malformed: redcon replies
	}
	switch {
	case le.Err == ErrBulkTooLong && !authed && le.Limit == unauthMaxBulk:
		return replyUnauthBulk
	case le.Err == ErrTooManyArgs && !authed && le.Limit == unauthMaxArgs:
		return replyUnauthArgs
	case le.Err == ErrBulkTooLong:
		return replyBulkTooLong
	case le.Err == ErrTooManyArgs:
		return replyTooManyArgs
	case le.Err == ErrInlineTooLong:
		return replyInlineTooLong
	case le.Err == ErrRequestTooLarge:
		return replyRequestTooLong
	case st == stCount:
		return replyCountTooLong
	default:
		return replyLengthTooLong
	}
}

type frameState uint8

const (
	stFrame  frameState = iota // between commands
	stInline                   // in an inline line
	stCount                    // in the "*N\r\n" header
	stDollar                   // expecting the '$' of the next bulk string
	stLength                   // in a "$LEN\r\n" header
	stData                     // in bulk data
	stCR                       // expecting the '\r' after bulk data
	stLF                       // expecting the '\n' after bulk data
	stDead                     // after input redcon rejects
)

// framer follows the command framing of a byte stream as redcon reads it.
type framer struct {
	st     frameState
	req    int // bytes of the current command so far
	args   int // bulk strings still expected
	left   int // bulk data bytes still expected
	bulk   int // the length of the bulk string being read
	bad    bool
	line   []byte // the header line so far, after '*' or '$'
	spaces int    // spaces in the inline line so far
	// QUIT is recognised, for a watch, from the first headLen bytes of a
	// command and where its first bulk string starts and how long it is.
	head     []byte
	firstAt  int // -1 until the first "$LEN" header has been read
	firstLen int
	quit     bool // a complete QUIT command has been framed
	// ends are where the commands that ended in the last scan end, as
	// offsets of its p; a guard's Read makes them offsets of its p (Ends).
	ends []int
}

// headLen is how much of a command is kept to recognise QUIT: the longest
// "*N" and "$LEN" header lines and "quit".
const headLen = 2*(maxHeader+2) + 4

// scan frames p. It returns how many bytes of p redcon may have: all of p;
// or, with one set, those up to the end of the first command p completes; or
// on a broken limit (a *LimitError), those before the offending command; or
// on malformed input (ErrMalformedRequest), those up to and including the
// byte where redcon rejects it. ended reports whether a command ended in p.
func (f *framer) scan(p []byte, lim *Limits, one bool) (used int, ended bool, err error) {
	start := 0 // where the current command starts in p, 0 if before p
	for i := 0; i < len(p); {
		if f.st == stDead {
			return i, ended, ErrMalformedRequest
		}
		if f.st == stFrame {
			if ended && one {
				return i, true, nil
			}
			start = i
		}
		k, err := f.step(p[i:], lim)
		if err != nil {
			return start, ended, err
		}
		f.keepHead(p[i : i+k])
		i += k
		f.req += k
		if f.st == stFrame {
			ended = true
			f.ends = append(f.ends, i)
			f.endCommand()
		} else if f.req > lim.MaxRequest && f.st != stDead {
			return start, ended, &LimitError{Err: ErrRequestTooLarge, Limit: lim.MaxRequest, Got: f.req}
		}
	}
	if f.st == stDead {
		return len(p), ended, ErrMalformedRequest
	}
	return len(p), ended, nil
}

// step consumes at least one byte at the start of b and returns how many.
func (f *framer) step(b []byte, lim *Limits) (int, error) {
	c := b[0]
	switch f.st {
	case stFrame:
		if c == '*' {
			f.st, f.line, f.firstAt = stCount, f.line[:0], -1
			return 1, nil
		}
		f.st, f.spaces = stInline, 0
		return f.inline(b, lim)
	case stInline:
		return f.inline(b, lim)
	case stCount, stLength:
		return 1, f.header(c, lim)
	case stDollar:
		f.st, f.line = stLength, f.line[:0]
		if c != '$' {
			f.st = stDead
		}
		return 1, nil
	case stData:
		k := min(f.left, len(b))
		if f.left -= k; f.left == 0 {
			f.st = stCR
		}
		return k, nil
	case stCR:
		f.bad, f.st = c != '\r', stLF
	case stLF:
		f.endBulk(c)
	}
	return 1, nil
}

// inline consumes inline bytes up to and including a '\n'. Besides
// MaxInline, it bounds what redcon's inline parser allocates: a buffer the
// size of the rest of the line for each word, so a line of n bytes with w
// spaces costs up to n*(w+1) bytes, which must stay within MaxRequest.
func (f *framer) inline(b []byte, lim *Limits) (int, error) {
	k := bytes.IndexByte(b, '\n') + 1
	if k == 0 {
		k = len(b)
	}
	f.spaces += bytes.Count(b[:k], []byte{' '})
	n := f.req + k // the line's bytes so far, less "\r\n" below
	if b[k-1] == '\n' {
		f.st = stFrame
		n--
		if k >= 2 && b[k-2] == '\r' || k == 1 && f.bad {
			n--
		}
	} else if f.bad = b[k-1] == '\r'; f.bad { // maybe the '\r' before '\n'
		n--
	}
	if n > lim.MaxInline || n*(f.spaces+1) > lim.MaxRequest {
		return 0, &LimitError{Err: ErrInlineTooLong, Limit: lim.MaxInline, Got: n}
	}
	return k, nil
}

// header consumes a byte of a "*N" or "$LEN" line, after the '*' or '$'.
func (f *framer) header(c byte, lim *Limits) error {
	if c != '\n' {
		if len(f.line) == maxHeader-1 { // the '*' or '$' counts
			return &LimitError{Err: ErrHeaderTooLong, Limit: maxHeader, Got: maxHeader + 1}
		}
		f.line = append(f.line, c)
		return nil
	}
	if len(f.line) == 0 || f.line[len(f.line)-1] != '\r' {
		f.st = stDead
		return nil
	}
	v, ok := parseInt(f.line[:len(f.line)-1])
	if f.st == stCount {
		return f.count(v, ok, lim)
	}
	return f.length(v, ok, lim)
}

// count checks a "*N" header. redcon loops N times over the buffer before it
// looks at the data, so a huge N (its parseInt also wraps a negative one
// around to a huge positive) spins it forever: N must be within MaxArgs.
func (f *framer) count(v int, ok bool, lim *Limits) error {
	switch {
	case ok && (v > lim.MaxArgs || v < -lim.MaxArgs):
		return &LimitError{Err: ErrTooManyArgs, Limit: lim.MaxArgs, Got: abs(v)}
	case !ok || v <= 0:
		f.st = stDead
	default:
		f.st, f.args = stDollar, v
	}
	return nil
}

// length checks a "$LEN" header. redcon adds LEN to an index unchecked, so
// a length near the int range overflows and panics it: LEN must be within
// MaxBulk, and the command within MaxRequest.
func (f *framer) length(v int, ok bool, lim *Limits) error {
	switch {
	case ok && (v > lim.MaxBulk || v < -lim.MaxBulk):
		return &LimitError{Err: ErrBulkTooLong, Limit: lim.MaxBulk, Got: abs(v)}
	case !ok || v < 0:
		f.st = stDead
		return nil
	case f.req+1+v+2 > lim.MaxRequest:
		return &LimitError{Err: ErrRequestTooLarge, Limit: lim.MaxRequest, Got: f.req + 1 + v + 2}
	}
	if f.firstAt < 0 {
		f.firstAt, f.firstLen = f.req+1, v // f.req counts the bytes before this '\n'
	}
	f.st, f.left, f.bulk = stData, v, v
	if v == 0 {
		f.st = stCR
	}
	return nil
}

// parseInt is redcon's: an optional '-' and digits, "" and "-" being 0. It
// saturates where redcon's wraps around, which count and length refuse.
func parseInt(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int(c-'0'), math.MaxInt32)
	}
	if neg {
		n = -n
	}
	return n, true
}

func abs(v int) int { return max(v, -v) }

// endBulk handles the byte where redcon expects the '\n' after bulk data.
func (f *framer) endBulk(c byte) {
	switch f.args--; {
	case f.bad || c != '\n':
		f.st = stDead
	case f.args == 0:
		f.st = stFrame
	default:
		f.st = stDollar
	}
}

func (f *framer) keepHead(b []byte) {
	if n := len(f.head); n < headLen {
		f.head = append(f.head, b[:min(len(b), headLen-n)]...)
	}
}

// endCommand ends a well-formed command.
func (f *framer) endCommand() {
	f.quit = f.quit || f.isQuit()
	f.req, f.bad, f.head = 0, false, f.head[:0]
}
