package passthrough

import (
	"bufio"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"time"
)

// shared is one upstream connection that many clients' plain commands go
// through, pipelined: callers append their command to the next write and
// the reader hands each reply to the caller whose command it answers, in
// the order they were written. The caller that finds no write under way
// writes, for itself and for everyone who queued meanwhile (no writer
// goroutine to wake for each command), after giving the goroutines ready
// to run a turn to queue theirs.
type shared struct {
	nc     net.Conn
	wlimit time.Duration // bound of one write

	mu      sync.Mutex
	out     []byte     // commands not yet written
	spare   []byte     // the buffer last written, reused for out
	writing bool       // a caller is writing out
	pending chan *call // calls written or about to be, in order
	err     error      // set once the connection broke: it takes no more calls
}

// call is one command waiting for its reply. A client's calls are reused
// (getCall, putCall) once their reply was written: no allocation per
// forwarded command.
type call struct {
	reply    []byte
	err      error
	deadline time.Time     // the reply must have come by then
	done     chan struct{} // gets one value when reply or err is set
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
	c.reply, c.err = c.reply[:0], nil
	calls.Put(c)
}

// maxPooledReply is the largest reply buffer kept for reuse.
const maxPooledReply = 64 << 10

// maxPending bounds the calls in flight on one shared connection; more are
// refused (each client has at most maxQueued in flight).
const maxPending = 1 << 16

var errBroken = errors.New("connection to the data Redis broke off")

// newShared starts the reader of an established connection; a write
// taking longer than wlimit breaks it.
func newShared(u *upConn, wlimit time.Duration) *shared {
	_ = u.nc.SetDeadline(time.Time{}) // set-up commands set one; calls time out by themselves
	s := &shared{nc: u.nc, wlimit: wlimit, pending: make(chan *call, maxPending)}
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
		return s.err
	}
	select {
	case s.pending <- c: // under mu: replies come back in the order commands are written
	default:
		s.mu.Unlock()
		return errors.New("too many commands in flight on one upstream connection")
	}
	s.out = appendCommand(s.out, args)
	if s.writing {
		s.mu.Unlock()
		return nil // the writer takes it along
	}
	s.writing = true
	s.mu.Unlock()
	// Let the other clients' goroutines that are ready to run (woken by
	// the same poll, typically) add their commands first: they then go
	// upstream in this one write, as a proxy's event loop writes what it
	// read from all its ready clients at once.
	runtime.Gosched()
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
		_ = s.nc.SetWriteDeadline(time.Now().Add(s.wlimit))
		_, err := s.nc.Write(buf)
		s.mu.Lock()
		s.spare = buf[:0]
		s.mu.Unlock()
		if err != nil {
			s.fail(err)
		}
	}
}

// wait returns c's reply once it came. It comes by c's deadline: the
// reader fails the connection then (a late reply would answer the next
// caller).
func (s *shared) wait(c *call) ([]byte, error) {
	<-c.done
	return c.reply, c.err
}

// read hands each reply to the oldest waiting call. Its reads time out at
// that call's deadline, or at most slack after it: the deadline is moved
// only when it would otherwise come early, and then with slack to spare, so
// that most replies do not each reset it.
func (s *shared) read(br *bufio.Reader) {
	slack := s.wlimit / 8
	var set time.Time
	for c := range s.pending {
		if c.deadline.After(set) {
			set = c.deadline.Add(slack)
			_ = s.nc.SetReadDeadline(set)
		}
		reply, err := readReply(br, c.reply[:0])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = errors.Join(errors.New("no reply within the timeout"), err)
		}
		if err != nil {
			s.fail(err) // before the caller hears of it: it may ask broken()
		}
		c.reply, c.err = reply, err
		c.done <- struct{}{}
		if err != nil {
			s.drain(err)
			return
		}
	}
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
func (s *shared) drain(err error) {
	for c := range s.pending {
		c.err = err
		c.done <- struct{}{}
	}
}

// broken reports whether the connection can take no more calls.
func (s *shared) broken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

func (s *shared) close() { s.fail(errors.New("closed")) }
