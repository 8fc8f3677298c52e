package resp

import (
	"io"
	"math"
	"net"
	"sync/atomic"
	"time"
)

// Limits bound what one client may send. Zero fields take the defaults.
type Limits struct {
	MaxBulk    int // longest bulk string, or inline argument, in bytes (default 1 MiB)
	MaxArgs    int // most elements in one multibulk request, or words in one inline command (default 4096)
	MaxInline  int // longest inline (telnet-style) command line in bytes, "\r\n" excluded (default 64 KiB, like Redis)
	MaxRequest int // most bytes of one multibulk request frame, headers included (default 4 MiB)
}

const (
	defaultMaxBulk    = 1 << 20
	defaultMaxArgs    = 4096
	defaultMaxInline  = 64 << 10
	defaultMaxRequest = 4 << 20

	// maxLimit caps every limit so that a length read digit by digit cannot overflow an int.
	maxLimit = (math.MaxInt - 9) / 10

	// maxHeader is the longest "*N" or "$LEN" header line, in bytes before its '\n'.
	maxHeader = 32

	// guardReplyTimeout bounds the write of the error reply to a client that does not read.
	guardReplyTimeout = time.Second
)

// Redis's replies to the limit errors.
const (
	replyBulkTooLong    = "-ERR Protocol error: invalid bulk length\r\n"
	replyTooManyArgs    = "-ERR Protocol error: invalid multibulk length\r\n"
	replyInlineTooLong  = "-ERR Protocol error: too big inline request\r\n"
	replyRequestTooLong = "-ERR Protocol error: too big request\r\n"
	replyCountTooLong   = "-ERR Protocol error: too big mbulk count string\r\n"
	replyLengthTooLong  = "-ERR Protocol error: too big bulk count string\r\n"
)

// WithDefaults returns l with every zero or negative field set to its default
// and every field capped at a value that cannot overflow while digits are read.
func (l Limits) WithDefaults() Limits {
	l.MaxBulk = limitOr(l.MaxBulk, defaultMaxBulk)
	l.MaxArgs = limitOr(l.MaxArgs, defaultMaxArgs)
	l.MaxInline = limitOr(l.MaxInline, defaultMaxInline)
	l.MaxRequest = limitOr(l.MaxRequest, defaultMaxRequest)
	return l
}

func limitOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return min(v, maxLimit)
}

// Guard wraps c so that Read fails once the client's byte stream breaks a limit.
//
// Guard frames the stream as redcon does, byte by byte and without buffering:
// a frame starting with '*' is a multibulk request, any other byte starts an
// inline command ending at '\n', which redcon splits into words. A "*N" or
// "$LEN" header line may be 32 bytes long. MaxRequest bounds multibulk frames;
// an inline frame is bounded by MaxInline, and its words by MaxArgs and MaxBulk.
//
// The Read that meets a frame breaking a limit returns only the bytes before
// that frame, so the complete commands ahead of it are still served; the next
// Read writes Redis's error reply to c, waiting at most a second, and returns
// a *LimitError, as does every Read after it. Input redcon rejects as
// malformed is passed through up to the byte where redcon rejects it, and
// every Read after that returns ErrMalformedRequest.
//
// Read must not be called concurrently.
func Guard(c net.Conn, lim Limits) net.Conn {
	return &guardConn{Conn: c, framer: framer{lim: lim.WithDefaults()}}
}

// GuardListener wraps every connection ln accepts with Guard.
func GuardListener(ln net.Listener, lim Limits) net.Listener {
	return &guardListener{Listener: ln, lim: lim.WithDefaults()}
}

type guardListener struct {
	net.Listener
	lim Limits
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Guard(c, l.lim), nil
}

var (
	_ net.Conn     = (*guardConn)(nil)
	_ net.Listener = (*guardListener)(nil)
)

type guardState uint8

const (
	gsFrame  guardState = iota // between frames
	gsInline                   // in an inline command line
	gsCount                    // in the "*N\r\n" header
	gsDollar                   // expecting the '$' of the next bulk string
	gsLength                   // in a "$LEN\r\n" header
	gsData                     // in bulk data
	gsCR                       // expecting the '\r' after bulk data
	gsLF                       // expecting the '\n' after bulk data
	gsDead                     // after malformed input redcon rejects
)

type guardConn struct {
	net.Conn
	framer       // has framed every byte Read returned
	err    error // sticky, returned by every Read once set

	// A watch (watch.go) reads the socket while a command blocks. Read
	// serves what it read, then the error that ended it, before the socket.
	watch   *watch
	look    []byte
	lookErr error
	rdl     atomic.Pointer[time.Time] // the read deadline last set, which a watch restores
}

// framer frames a byte stream as redcon does and checks it against the limits.
type framer struct {
	lim   Limits
	reply string // Redis's reply to the broken limit, still to be written
	st    guardState
	req   int // bytes of the current multibulk frame so far
	args  int // bulk strings still expected in the current frame
	left  int // bulk data bytes still expected
	hdr   headerLine
	inl   inlineLine
	qm    int8 // how the current frame's first argument matches "quit": qmNo, qmYes, or bytes matched so far
	quit  bool // a QUIT command has been framed
}

// Values of framer.qm besides the 0 to 4 bytes of "quit" matched so far.
const (
	qmNo  = -1 // the first argument is not "quit"
	qmYes = 5  // the first argument was "quit"
)

// headerLine is the state of a "*N" or "$LEN" line.
type headerLine struct {
	n   int  // bytes before '\n' so far, '*' or '$' included
	val int  // value of the digits so far
	neg bool // the value has a '-' sign
	cr  bool // the last byte was '\r'
	bad bool // redcon will reject the line at its '\n'
}

// inlineLine is the state of an inline command line, split into words as redcon does.
type inlineLine struct {
	n      int  // bytes before '\n' so far
	words  int  // complete words
	word   int  // bytes of the current word
	quote  byte // the quote the current word opened, or 0
	cr     bool // the last byte was '\r'; it is data unless '\n' follows
	esc    bool // the last byte was a backslash inside quotes
	closed bool // the last byte closed a quote, so a space must follow
	bad    bool // redcon will reject the line at its '\n'
}

func (g *guardConn) Read(p []byte) (int, error) {
	if g.watch != nil {
		g.watch.stop() // the handler did not
	}
	if g.err != nil {
		return 0, g.fail()
	}
	n, err := g.readAhead(p)
	keep, serr := g.scan(p[:n])
	if serr == nil {
		return n, err
	}
	g.err = serr
	if keep > 0 {
		return keep, nil
	}
	return 0, g.fail()
}

// fail writes the pending reply, once and best effort, and returns the sticky error.
func (g *guardConn) fail() error {
	if g.reply != "" {
		_ = g.Conn.SetWriteDeadline(time.Now().Add(guardReplyTimeout))
		_, _ = io.WriteString(g.Conn, g.reply)
		g.reply = ""
	}
	return g.err
}

// scan advances the state machine over p. On a broken limit it returns the
// number of bytes of p before the offending frame; on malformed input, the
// number of bytes up to and including the one redcon rejects.
func (g *framer) scan(p []byte) (int, error) {
	start := 0 // where the current frame starts in p, 0 if it started before p
	for i := 0; i < len(p); i++ {
		c := p[i]
		var err error
		switch g.st {
		case gsData:
			k := min(g.left, len(p)-i)
			if g.qm >= 0 && g.qm < qmYes { // in the first argument
				g.quitBytes(p[i : i+k])
			}
			g.left -= k
			g.req += k
			i += k - 1
			if g.left == 0 {
				g.st = gsCR
			}
		case gsCount, gsLength:
			err = g.header(c)
		case gsDollar:
			if n := g.fastBulk(p[i:]); n > 0 {
				i += n - 1
				continue
			}
			err = g.dollar(c)
		case gsCR:
			g.req++
			g.hdr.bad = c != '\r'
			g.st = gsLF
		case gsLF:
			g.endBulk(c)
		case gsInline:
			err = g.inline(c)
		case gsFrame:
			start = i
			if n := g.fastCount(p[i:]); n > 0 {
				i += n - 1
				continue
			}
			err = g.frame(c)
		case gsDead:
			return i, ErrMalformedRequest
		}
		if err != nil {
			return start, err
		}
	}
	if g.st == gsDead {
		return len(p), ErrMalformedRequest
	}
	return len(p), nil
}

// fastCount consumes a "*N\r\n" line at the start of b and returns its
// length, if the line is all in b, well formed, without leading zeros and
// within the limits. Otherwise it returns 0 and the line is read byte by
// byte, to the same effect.
func (g *framer) fastCount(b []byte) int {
	v, n := fastHeader(b, '*', g.lim.MaxArgs)
	if n == 0 || v == 0 || n > g.lim.MaxRequest {
		return 0
	}
	g.st, g.req, g.args, g.qm = gsDollar, n, v, 0
	return n
}

// fastBulk is fastCount for a "$LEN\r\n" line, and for the bulk data and
// "\r\n" after it too if they are in b.
func (g *framer) fastBulk(b []byte) int {
	v, n := fastHeader(b, '$', g.lim.MaxBulk)
	if n == 0 || g.req+n+v+2 > g.lim.MaxRequest {
		return 0
	}
	end := n + v + 2
	if end > len(b) || b[end-2] != '\r' || b[end-1] != '\n' {
		g.st, g.req, g.left = gsData, g.req+n, v
		if v == 0 {
			g.st = gsCR
		}
		return n
	}
	g.req += end
	if g.qm == 0 { // the first argument, whole
		g.quitBytes(b[n : n+v])
		g.endArg()
	}
	if g.args--; g.args == 0 {
		g.endFrame()
	}
	return end
}

// fastHeader parses a header line of prefix, digits with no leading zero, and
// "\r\n" at the start of b, and returns its value and length. The length is
// 0 if b does not start with such a line or its value is over max.
func fastHeader(b []byte, prefix byte, max int) (val, n int) {
	if len(b) < 4 || b[0] != prefix || b[1] == '0' && b[2] != '\r' {
		return 0, 0
	}
	i := 1
	for ; i < len(b); i++ {
		d := b[i] - '0'
		if d > 9 {
			break
		}
		if val = val*10 + int(d); val > max {
			return 0, 0
		}
	}
	if i == 1 || i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return 0, 0
	}
	return val, i + 2
}

func (g *framer) frame(c byte) error {
	g.qm = 0
	if c == '*' {
		g.st, g.req, g.hdr = gsCount, 1, headerLine{n: 1}
		return nil
	}
	g.st, g.inl = gsInline, inlineLine{}
	return g.inline(c)
}

// header consumes a byte of a "*N" or "$LEN" line, after the '*' or '$'.
func (g *framer) header(c byte) error {
	if err := g.count(); err != nil {
		return err
	}
	h := &g.hdr
	if c == '\n' {
		return g.endHeader()
	}
	if h.n++; h.n > maxHeader {
		return g.limit(ErrHeaderTooLong, maxHeader, h.n)
	}
	h.bad = h.bad || h.cr // a '\r' not followed by '\n' is no digit
	h.cr = c == '\r'
	switch {
	case h.cr || h.bad:
	case c >= '0' && c <= '9':
		return g.digit(c)
	case c == '-' && h.n == 2:
		h.neg = true
	default:
		h.bad = true
	}
	return nil
}

// digit adds a digit to the header value. A negative value is limited too:
// redcon's parseInt wraps around, so "*-9999999999999999999" is a huge count
// to it, and "$-9999999999999999999" a huge length.
func (g *framer) digit(c byte) error {
	h := &g.hdr
	h.val = h.val*10 + int(c-'0')
	if g.st == gsCount && h.val > g.lim.MaxArgs {
		return g.limit(ErrTooManyArgs, g.lim.MaxArgs, h.val)
	}
	if g.st == gsLength && h.val > g.lim.MaxBulk {
		return g.limit(ErrBulkTooLong, g.lim.MaxBulk, h.val)
	}
	return nil
}

// endHeader handles the '\n' of a header line. redcon wants "\r\n" after
// the digits, at least one element and no negative length but "-0".
func (g *framer) endHeader() error {
	h := &g.hdr
	count := g.st == gsCount
	switch {
	case !h.cr || h.bad || count && (h.neg || h.val == 0) || h.neg && h.val != 0:
		g.st = gsDead
	case count:
		g.st, g.args = gsDollar, h.val
	case g.req+h.val+2 > g.lim.MaxRequest:
		return g.limit(ErrRequestTooLarge, g.lim.MaxRequest, g.req+h.val+2)
	case h.val == 0:
		g.st = gsCR
	default:
		g.st, g.left = gsData, h.val
	}
	return nil
}

func (g *framer) dollar(c byte) error {
	if err := g.count(); err != nil {
		return err
	}
	if c != '$' {
		g.st = gsDead
		return nil
	}
	g.st, g.hdr = gsLength, headerLine{n: 1}
	return nil
}

// endBulk handles the byte where redcon expects the '\n' after bulk data.
// The frame size was checked against MaxRequest at the "$LEN" header.
func (g *framer) endBulk(c byte) {
	g.req++
	g.args--
	switch {
	case g.hdr.bad || c != '\n':
		g.st = gsDead
		return
	case g.args == 0:
		g.endArg()
		g.endFrame()
	default:
		g.endArg()
		g.st = gsDollar
	}
}

// count adds a header byte to the frame size.
func (g *framer) count() error {
	if g.req++; g.req > g.lim.MaxRequest {
		return g.limit(ErrRequestTooLarge, g.lim.MaxRequest, g.req)
	}
	return nil
}

// inline consumes a byte of an inline command line. A '\r' counts as data
// until the next byte shows it is not the one before '\n', which redcon drops.
func (g *framer) inline(c byte) error {
	l := &g.inl
	if c == '\n' {
		if l.bad || l.quote != 0 {
			g.st = gsDead
			return nil
		}
		if l.word > 0 {
			if err := g.endWord(); err != nil {
				return err
			}
		}
		g.endFrame()
		return nil
	}
	if l.n++; l.n > g.lim.MaxInline && (l.n > g.lim.MaxInline+1 || c != '\r') {
		return g.limit(ErrInlineTooLong, g.lim.MaxInline, l.n)
	}
	if l.cr {
		if err := g.char('\r'); err != nil {
			return err
		}
	}
	if l.cr = c == '\r'; l.cr {
		return nil
	}
	return g.char(c)
}

// char splits inline data into words as redcon does: spaces separate words,
// a word may be in double or single quotes and then must be followed by a space,
// and a backslash inside quotes escapes the next byte: "\n", "\r" and "\t"
// stand for control characters, and any other byte for itself.
func (g *framer) char(c byte) error {
	l := &g.inl
	switch {
	case l.bad:
	case l.quote != 0:
		return g.quoted(c)
	case l.closed && c != ' ':
		l.bad = true
	case c == ' ':
		l.closed = false
		if l.word > 0 {
			l.word = 0
			return g.endWord()
		}
	case c == '"' || c == '\'':
		l.bad = l.word > 0
		l.quote = c
	default:
		return g.grow(c)
	}
	return nil
}

func (g *framer) quoted(c byte) error {
	l := &g.inl
	switch {
	case l.esc:
		l.esc = false
		c = unescape(c)
	case c == l.quote:
		l.quote, l.closed, l.word = 0, true, 0
		return g.endWord()
	case c == '\\':
		l.esc = true
		return nil
	}
	return g.grow(c)
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c
}

// grow adds c to the current word.
func (g *framer) grow(c byte) error {
	g.quitByte(c)
	if g.inl.word++; g.inl.word > g.lim.MaxBulk {
		return g.limit(ErrBulkTooLong, g.lim.MaxBulk, g.inl.word)
	}
	return nil
}

func (g *framer) endWord() error {
	g.endArg()
	if g.inl.words++; g.inl.words > g.lim.MaxArgs {
		return g.limit(ErrTooManyArgs, g.lim.MaxArgs, g.inl.words)
	}
	return nil
}

// limit records Redis's reply to a broken limit and returns the error.
func (g *framer) limit(err error, limit, got int) error {
	switch {
	case err == ErrBulkTooLong:
		g.reply = replyBulkTooLong
	case err == ErrTooManyArgs:
		g.reply = replyTooManyArgs
	case err == ErrInlineTooLong:
		g.reply = replyInlineTooLong
	case err == ErrRequestTooLarge:
		g.reply = replyRequestTooLong
	case g.st == gsCount:
		g.reply = replyCountTooLong
	default:
		g.reply = replyLengthTooLong
	}
	return &LimitError{Err: err, Limit: limit, Got: got}
}

// quitBytes matches bytes of the current frame's first argument against
// "quit" in any letter case, as the command table does. It ignores the bytes
// of later arguments, whose match is settled.
func (g *framer) quitBytes(b []byte) {
	for _, c := range b {
		if g.qm < 0 || g.qm == qmYes {
			return
		}
		g.quitByte(c)
	}
}

func (g *framer) quitByte(c byte) {
	switch {
	case g.qm < 0 || g.qm == qmYes:
	case g.qm < 4 && c|0x20 == "quit"[g.qm]: // | 0x20 lowers the case of letters, and only they can match
		g.qm++
	default:
		g.qm = qmNo
	}
}

// endArg settles the match when an argument ends: the first is "quit" or not.
func (g *framer) endArg() {
	switch {
	case g.qm == 4:
		g.qm = qmYes
	case g.qm < 4:
		g.qm = qmNo
	}
}

// endFrame ends a well-formed frame, which is a QUIT command if its first
// argument is "quit" (QUIT takes any arguments).
func (g *framer) endFrame() {
	g.st = gsFrame
	g.quit = g.quit || g.qm == qmYes
}
