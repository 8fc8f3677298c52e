package resp

import (
	"net"
	"sync"
)

// stream is the write turn of a connection that streams (Stream): its
// commands are served one at a time, and other goroutines may write to the
// client between two commands' replies.
type stream struct {
	mu sync.Mutex // the write turn: held while a command is served and flushed, and by Write
}

// Stream prepares the connection for writers in other goroutines (relayed
// pub/sub messages): once the current command's handler returns, the
// replies buffered so far are flushed, then commands are read and served
// one at a time, as before, each one's replies flushed before the next is
// read; Write may then be called from any goroutine. Call it from a
// handler. The handler keeps the write turn until it returns; see Unheld.
// Calling it again does nothing.
func (c *Conn) Stream() {
	if c.stream != nil {
		return
	}
	st := &stream{}
	st.mu.Lock() // given up by Server.serve once the handler returns
	c.stream = st
}

// Write writes b, whole RESP frames, to the client between two commands'
// replies, from any goroutine, once Stream was called. It reports false
// when the connection is closed (or was never streamed).
func (c *Conn) Write(b []byte) bool {
	st := c.stream
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if c.closing.Load() {
		return false
	}
	// What is written here (relayed messages) is not a command's reply:
	// CLIENT REPLY OFF does not hold it back, as Redis delivers messages.
	was := c.SetReplying(true)
	c.rc.WriteRaw(b)
	c.SetReplying(was)
	return c.rc.Flush() == nil
}

// Unheld runs f without the write turn, so that Write can proceed while the
// handler waits for what other goroutines write. The handler must have
// written nothing of its own reply yet. Outside a stream it just runs f.
func (c *Conn) Unheld(f func()) {
	st := c.stream
	if st == nil {
		f()
		return
	}
	st.mu.Unlock()
	defer st.mu.Lock()
	f()
}

// turn runs f, which writes to the client outside a command's handler,
// holding the write turn when the connection streams.
func (c *Conn) turn(f func()) {
	if st := c.stream; st != nil {
		st.mu.Lock()
		defer st.mu.Unlock()
	}
	f()
}

// Drop closes the connection from any goroutine, at once (guardConn's
// Abort); the connection's own goroutine then runs its Closed callbacks.
func (c *Conn) Drop() {
	c.closing.Store(true)
	_ = c.rc.g.Abort()
}

var _ net.Conn = (*guardConn)(nil)
