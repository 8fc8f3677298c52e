package passthrough

import (
	"bufio"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/resp"
)

// shared is one upstream connection that many clients' plain commands go
// through, pipelined: callers append their command to the next write and
// the reader writes each reply to the client whose command it answers
// (through the client's resp.Sink, flushed once per burst of replies it
// read), or hands it to a caller that waits for it, in the order the
// commands were written. The caller that finds no write under way
// writes, for itself and for everyone who queued meanwhile (no writer
// goroutine to wake for each command), after giving the goroutines ready
// to run a turn to queue theirs.
type shared struct {
	nc      net.Conn
	timeout time.Duration // bounds one write (with an eighth to spare), and the wait for each reply (read)

	mu      sync.Mutex
	out     []byte     // commands not yet written
	spare   []byte     // the buffer last written, reused for out
	writing bool       // a caller is writing out
	wset    time.Time  // the write deadline in force, changed by the caller writing
	pending chan *call // calls written or about to be, in order
	err     error      // set once the connection broke: it takes no more calls

	addr   string        // the data Redis's, for the error replies written to clients
	failed *atomic.Int64 // counts the calls of clients that got an error reply
}

// call is one command waiting for its reply. A client's calls are reused
// (getCall, putCall) once their reply was written: no allocation per
// forwarded command.
type call struct {
	reply    []byte
	err      error
	deadline time.Time // the reply must have come by then
	// sink, when set, is the client's writer: the reader puts the reply,
	// or the error reply, there (dropped when quiet) and gives the call
	// back (putCall). Otherwise done gets one value when reply or err is set.
	sink  *resp.Sink
	quiet bool
	done  chan struct{}
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// getCall is a call to send, answered by deadline.
func getCall(deadline time.Time) *call {
	c := calls.Get().(*call)
	c.deadline = deadline
	return c
}

// putCall gives back a call whose reply was received and used.
func putCall(c *call) {
	if cap(c.reply) > maxPooledReply {
		c.reply = nil
	}
	c.reply, c.err, c.sink, c.quiet = c.reply[:0], nil, nil, false
	calls.Put(c)
}

// maxPooledReply is the largest reply buffer kept for reuse.
const maxPooledReply = 64 << 10

// maxPending bounds the calls in flight on one shared connection; more are
// refused (each client has at most maxQueued in flight).
const maxPending = 1 << 16

var errBroken = errors.New("connection to the data Redis broke off")

// newShared starts the reader of an established connection; a write
// taking longer than timeout breaks it.
func newShared(u *upConn, timeout time.Duration) *shared {
	_ = u.nc.SetDeadline(time.Time{}) // set-up commands set one; calls time out by themselves
	s := &shared{nc: u.nc, timeout: timeout, pending: make(chan *call, maxPending), failed: new(atomic.Int64)}
	go s.read(u.br)
	return s
}

// do sends args and waits for the reply, at most timeout.
func (s *shared) do(args [][]byte, timeout time.Duration) ([]byte, error) {
	c := &call{done: make(chan struct{}, 1), deadline: time.Now().Add(timeout)}
	if err := s.send(c, args); err != nil {
		return nil, err
	}
	return s.wait(c)
}

// send queues args for the next write; c gets its reply. Calls are
// answered in the order they were sent.
func (s *shared) send(c *call, args [][]byte) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return notSent(s.err)
	}
	select {
	case s.pending <- c: // under mu: replies come back in the order commands are written
	default:
		s.mu.Unlock()
		return notSent(errors.New("too many commands in flight on one upstream connection"))
	}
	s.out = appendCommand(s.out, args)
	if s.writing {
		s.mu.Unlock()
		return nil // the writer takes it along
	}
	s.writing = true
	busy := len(s.pending) > 1
	s.mu.Unlock()
	// While other commands are in flight, let the other clients'
	// goroutines that are ready to run (woken by the same poll, typically)
	// add their commands first: they then go upstream in this one write,
	// as a proxy's event loop writes what it read from all its ready
	// clients at once. A lone command goes at once: yielding would only
	// wake an idle thread.
	if busy {
		runtime.Gosched()
	}
	s.writeOut()
	return nil
}

// writeOut writes what callers queued until nothing is left.
func (s *shared) writeOut() {
	for {
		s.mu.Lock()
		if len(s.out) == 0 || s.err != nil {
			s.writing = false
			s.mu.Unlock()
			return
		}
		buf := s.out
		s.out, s.spare = s.spare[:0], nil
		s.mu.Unlock()
		if now := time.Now(); s.wset.Before(now.Add(s.timeout)) {
			s.wset = now.Add(s.timeout + s.timeout/8) // moved once per slack, not per write
			_ = s.nc.SetWriteDeadline(s.wset)
		}
		_, err := s.nc.Write(buf)
		s.mu.Lock()
		s.spare = buf[:0]
		s.mu.Unlock()
		if err != nil {
			s.fail(err)
		}
	}
}

// wait returns c's reply once it came, or the error that says its outcome
// is unknown (read).
func (s *shared) wait(c *call) ([]byte, error) {
	<-c.done
	return c.reply, c.err
}

// read hands each reply to the oldest waiting call. A call's timeout
// counts from when it was sent or, if later, from when the reply before it
// came: time spent behind other commands (another client's slow one) is
// not its own. A call whose reply has not begun by then is told its outcome
// is unknown, and its reply, if it comes within another timeout, answers
// nobody; the calls behind it then go on. A connection that gives no reply
// for that long, or breaks off, fails every call still waiting (their
// outcome unknown too: they were sent).
func (s *shared) read(br *bufio.Reader) {
	var rd replyReader
	rd.br, rd.nc, rd.slack = br, s.nc, s.timeout/8
	var a answerer
	a.s = s
	defer a.flush()
	last := time.Now() // when the last reply came
	for {
		if br.Buffered() == 0 {
			a.flush() // the burst read so far, before waiting for more
		}
		c, ok, err := s.next(&rd)
		if err != nil {
			s.fail(err)
			s.drain(&a, unknown(err))
			return
		}
		if !ok {
			return
		}
		reply, err := rd.next(later(c.deadline, last.Add(s.timeout)), c.reply[:0])
		if errors.Is(err, os.ErrDeadlineExceeded) && !rd.begun {
			a.answer(c, reply, unknown(errTimeout))
			a.flush()
			_, err = rd.next(time.Now().Add(s.timeout), nil) // the late reply, to no one
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = errors.Join(errTimeout, err)
			}
			if err != nil {
				s.fail(err)
				s.drain(&a, unknown(err))
				return
			}
			last = time.Now()
			continue
		}
		if err != nil {
			s.fail(err) // before the caller hears of it: it may ask broken()
		}
		last = time.Now()
		a.answer(c, reply, unknown(err))
		if err != nil {
			s.drain(&a, unknown(err))
			return
		}
	}
}

// next is the oldest call waiting for its reply; false once the
// connection was closed. With none waiting, it waits for the first byte of
// a reply rather than for a call, so that a caller need not wake the
// reader: a reply comes only for a call, queued before its command was
// written. Meanwhile it looks for calls every slack, so that a call sent
// meanwhile is timed from then on (read).
func (s *shared) next(rd *replyReader) (*call, bool, error) {
	for {
		select {
		case c, ok := <-s.pending:
			return c, ok, nil
		default:
		}
		if now := time.Now(); rd.set.Before(now) {
			rd.set = now.Add(rd.slack)
			_ = rd.nc.SetReadDeadline(rd.set)
		}
		_, err := rd.br.Peek(1)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
		case err != nil:
			return nil, true, err
		}
		select {
		case c, ok := <-s.pending:
			return c, ok, nil
		default:
			return nil, true, errors.New("the data Redis sent a reply to no command")
		}
	}
}

// answerer gives the reader's calls their replies, and flushes the sinks
// it put replies in.
type answerer struct {
	s     *shared
	dirty []*resp.Sink // sinks to flush
	eb    []byte       // an error reply
}

// answer gives c its reply or err.
func (a *answerer) answer(c *call, reply []byte, err error) {
	if c.sink == nil {
		c.reply, c.err = reply, err
		c.done <- struct{}{}
		return
	}
	c.reply = reply // kept for the next use of c
	if err != nil {
		a.s.failed.Add(1)
		a.eb = redcon.AppendError(a.eb[:0], replyText(a.s.addr, err))
		reply = a.eb
	}
	if c.sink.Put(reply, c.quiet) {
		a.dirty = append(a.dirty, c.sink)
	}
	putCall(c)
}

// flush writes what was put in the sinks.
func (a *answerer) flush() {
	for i, k := range a.dirty {
		k.Flush()
		a.dirty[i] = nil
	}
	a.dirty = a.dirty[:0]
}

// replyReader reads a shared connection's replies under read deadlines
// that are moved only when they would come early, and then with slack to
// spare, so that most replies do not each reset them.
type replyReader struct {
	br    *bufio.Reader
	nc    net.Conn
	slack time.Duration
	set   time.Time // the read deadline in force
	begun bool      // the last next had the first byte of its reply
}

// next reads one reply into dst; a reply not begun by due fails with
// os.ErrDeadlineExceeded and begun false, having consumed nothing.
func (rd *replyReader) next(due time.Time, dst []byte) ([]byte, error) {
	if due.After(rd.set) {
		rd.set = due.Add(rd.slack)
		_ = rd.nc.SetReadDeadline(rd.set)
	}
	if _, err := rd.br.Peek(1); err != nil {
		rd.begun = false
		return dst, err
	}
	rd.begun = true
	return readReply(rd.br, dst)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fail marks the connection broken and closes it: the reader then fails
// every pending call.
func (s *shared) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = errors.Join(errBroken, err)
		_ = s.nc.Close()
		close(s.pending)
	}
}

// drain fails the calls still queued after the reader stopped.
func (s *shared) drain(a *answerer, err error) {
	for c := range s.pending {
		a.answer(c, c.reply[:0], err)
	}
}

// broken reports whether the connection can take no more calls.
func (s *shared) broken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

func (s *shared) close() { s.fail(errors.New("closed")) }
