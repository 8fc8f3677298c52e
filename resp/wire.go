package resp

import (
	"errors"
	"net"
	"sync"

	"github.com/tidwall/redcon"
)

// The connection loop's buffers. redcon's own server gives every
// connection a 4 KiB read buffer behind a 4 KiB bufio.Reader for as long
// as it is open; most of lockproxy's connections are idle most of the time
// (pools, holders of bound locks), so a connection here owns only
// idleReadSize bytes, and borrows a pooled readChunk buffer while it
// receives a batch of commands, a larger one only while one command is
// larger, and a pooled buffer for its replies only until they are written.
const (
	idleReadSize = 512      // a connection's own read buffer: one command, usually
	readChunk    = 16 << 10 // a borrowed read buffer
	maxPooledOut = 64 << 10 // a reply buffer larger than this is not kept for reuse
)

var (
	readBufs = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}
	outBufs  = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}
)

// errIncomplete is redcon's error for bytes that hold no command: it is what
// redcon.Parse says of a blank inline line, which is no command, as redcon's
// reader skips it.
var _, errIncomplete = redcon.Parse(nil)

// wire is a connection's socket as the loop uses it (redcon is only its
// parser): commands read in batches through the guard, replies buffered and
// written once per batch.
type wire struct {
	g      *guardConn
	addr   string
	in     cmdReader
	out    []byte // replies not yet written; nil between batches
	outP   *[]byte
	err    error // the write that failed; later replies are dropped
	closed bool  // Close was called
	quiet  bool  // replies written now are dropped (CLIENT REPLY OFF or SKIP)
	sink   *Sink // replies other goroutines write (Conn.Sink); nil until used
}

func newWire(g *guardConn) *wire {
	w := &wire{g: g, addr: g.RemoteAddr().String()}
	w.in.g = g
	return w
}

// NetConn is the guarded socket.
func (w *wire) NetConn() net.Conn { return w.g }

// RemoteAddr is the client's address.
func (w *wire) RemoteAddr() string { return w.addr }

func (w *wire) buf() []byte {
	if w.outP == nil {
		w.outP = outBufs.Get().(*[]byte)
		w.out = (*w.outP)[:0]
	}
	return w.out
}

// The Write methods buffer one reply, or drop it while quiet.
func (w *wire) WriteString(s string) {
	if !w.quiet {
		w.out = redcon.AppendString(w.buf(), s)
	}
}

func (w *wire) WriteError(msg string) {
	if !w.quiet {
		w.out = redcon.AppendError(w.buf(), msg)
	}
}

func (w *wire) WriteBulk(b []byte) {
	if !w.quiet {
		w.out = redcon.AppendBulk(w.buf(), b)
	}
}

func (w *wire) WriteBulkString(s string) {
	if !w.quiet {
		w.out = redcon.AppendBulkString(w.buf(), s)
	}
}

func (w *wire) WriteInt64(n int64) {
	if !w.quiet {
		w.out = redcon.AppendInt(w.buf(), n)
	}
}

func (w *wire) WriteArray(n int) {
	if !w.quiet {
		w.out = redcon.AppendArray(w.buf(), n)
	}
}

func (w *wire) WriteNull() {
	if !w.quiet {
		w.out = redcon.AppendNull(w.buf())
	}
}

func (w *wire) WriteRaw(b []byte) {
	if !w.quiet {
		w.out = append(w.buf(), b...)
	}
}

// Flush writes the buffered replies in one Write and gives their buffer
// back. After a failed write, replies are dropped and Flush returns the
// error.
func (w *wire) Flush() error {
	if w.outP == nil {
		return w.err
	}
	if w.sink != nil && len(w.out) > 0 {
		w.sink.Wait() // the replies expected before these go first
	}
	if len(w.out) > 0 && w.err == nil {
		_, w.err = w.g.Write(w.out)
	}
	if cap(w.out) <= maxPooledOut {
		*w.outP = w.out[:0]
		outBufs.Put(w.outP)
	}
	w.out, w.outP = nil, nil
	return w.err
}

// Close writes the buffered replies and closes the connection; the loop
// serves no further command.
func (w *wire) Close() error {
	_ = w.Flush()
	w.closed = true
	return w.g.Close()
}

// cmdReader reads a guarded connection's commands in batches: every
// complete command that one Read of the guard returned. The guard frames
// the bytes (and says where each command ends), redcon parses each
// command.
type cmdReader struct {
	g     *guardConn
	small []byte  // the connection's own buffer, idleReadSize
	buf   []byte  // the bytes of the command not yet complete, then room
	bufP  *[]byte // buf's entry in readBufs, if borrowed from it
	more  bool    // the last Read filled buf: the client may have sent more
}

// next reads the next batch of complete commands: the raw bytes of each,
// in one new allocation that the commands' arguments may keep.
func (r *cmdReader) next(cmds [][]byte) ([][]byte, error) {
	for {
		r.make()
		room := r.buf[len(r.buf):cap(r.buf)]
		n, err := r.g.Read(room)
		r.more = n == len(room)
		have := len(r.buf)
		r.buf = r.buf[:have+n]
		if ends := r.g.ends(); len(ends) > 0 {
			last := have + ends[len(ends)-1]
			batch := r.take(last)
			begin := 0
			for _, e := range ends {
				cmds = append(cmds, batch[begin:have+e:have+e])
				begin = have + e
			}
			if r.buf != nil {
				r.buf = r.buf[:copy(r.buf, r.buf[last:])]
			}
			return cmds, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// take returns the first n bytes of buf, complete commands, in memory of
// their own. A large buffer that holds nothing else is handed over whole
// rather than copied (buf is then nil), so that a long command is not
// held twice.
func (r *cmdReader) take(n int) []byte {
	if n < len(r.buf) || cap(r.buf) <= readChunk {
		return append([]byte(nil), r.buf[:n]...)
	}
	b := r.buf[:n:n]
	r.buf = nil
	r.g.unreserve()
	r.g.budget.dropped(cap(b))
	return b
}

// make readies buf for a Read: the small buffer when the connection is
// idle, a borrowed one while a batch may still be arriving, a larger one
// while a command fills the one it has.
func (r *cmdReader) make() {
	switch {
	case len(r.buf) == 0 && !r.more:
		r.drop()
		if r.small == nil {
			r.small = make([]byte, idleReadSize)
		}
		r.buf = r.small[:0]
	case len(r.buf) == cap(r.buf) || r.more && cap(r.buf) < readChunk:
		r.grow()
	}
}

// grow moves buf's bytes to a larger buffer: twice their size or, when
// the framing says how much the command is likely to need (expected), that
// much (and at least a quarter more, so that growth stays geometric), so
// that a long command is read into one buffer, not into a string of
// doublings that are garbage. A buffer larger than a borrowed one is reserved from the
// MaxBuffered budget first; if the budget has no room, buf stays as it is
// and the next Read fails.
func (r *cmdReader) grow() {
	size := 2 * len(r.buf)
	if want := r.g.expected(); want > 0 {
		size = len(r.buf) + max(want+growSlack, len(r.buf)/4)
	}
	var nb []byte
	var np *[]byte
	if size <= readChunk {
		np = readBufs.Get().(*[]byte)
		nb = (*np)[:0]
	} else if r.g.reserve(size) {
		nb = make([]byte, 0, size)
	} else {
		return
	}
	nb = append(nb, r.buf...)
	r.release()
	r.buf, r.bufP = nb, np
}

// growSlack is room beyond a bulk string's end, for the header of the
// next (or the next command) to be read with it.
const growSlack = 512

// drop lets go of buf and of the budget reserved for it.
func (r *cmdReader) drop() {
	r.release()
	r.g.unreserve()
}

// release gives a borrowed buffer back, and tells the budget of a large
// one dropped.
func (r *cmdReader) release() {
	if r.bufP != nil {
		readBufs.Put(r.bufP)
	} else if cap(r.buf) > readChunk {
		r.g.budget.dropped(cap(r.buf))
	}
	r.buf, r.bufP = nil, nil
}

// rejected is redcon's error for the input that ended the reading with
// err, when the guard let it through as malformed (ErrMalformedRequest):
// the bytes read that are no complete command end where redcon rejects
// them. nil for any other end.
func (r *cmdReader) rejected(err error) error {
	if !errors.Is(err, ErrMalformedRequest) {
		return nil
	}
	if _, perr := redcon.Parse(r.buf); perr != nil && !errors.Is(perr, errIncomplete) {
		return perr
	}
	return nil
}

// parseCommand parses raw, one command as the guard framed it. ok is false
// for a blank inline line, which is no command; err is redcon's protocol
// error for a line it rejects (unbalanced quotes).
func parseCommand(raw []byte) (cmd redcon.Command, ok bool, err error) {
	cmd, err = redcon.Parse(raw)
	if errors.Is(err, errIncomplete) {
		return cmd, false, nil
	}
	return cmd, err == nil, err
}
