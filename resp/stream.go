package resp

import (
	"errors"
	"io"
	"net"
	"sync"

	"github.com/tidwall/redcon"
)

// stream is a connection taken out of redcon's batch loop (Stream): its
// commands are served one at a time by a goroutine of its own, and other
// goroutines may write to the client between two commands' replies.
type stream struct {
	mu sync.Mutex // the write turn: held while a command is served and flushed, and by Write
	dc redcon.DetachedConn
}

// Stream prepares the connection for writers in other goroutines (relayed
// pub/sub messages): once the current command's handler returns, the
// replies buffered so far are flushed, then commands are read and served
// one at a time, as before, by a goroutine of the connection's own, each
// one's replies flushed before the next is read; Write may then be called
// from any goroutine. Call it from a handler. The handler keeps the write
// turn until it returns; see Unheld. Calling it again does nothing.
func (c *Conn) Stream() {
	if c.stream != nil {
		return
	}
	st := &stream{}
	st.mu.Lock() // handed to the stream's goroutine, which flushes first
	st.dc = c.rc.Detach()
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
	c.rc.WriteRaw(b)
	return st.dc.Flush() == nil
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

// Drop closes the connection from any goroutine; the connection's own
// goroutine then runs its Closed callbacks.
func (c *Conn) Drop() {
	c.closing.Store(true)
	_ = c.rc.NetConn().Close()
}

// serveStream is the streamed connection's goroutine, started when the
// handler that called Stream returned.
func (s *Server) serveStream(c *Conn) {
	st := c.stream
	err := st.dc.Flush()
	st.mu.Unlock()
	for err == nil && !c.closing.Load() {
		var cmd redcon.Command
		if cmd, err = st.dc.ReadCommand(); err != nil {
			break
		}
		st.mu.Lock()
		s.serve(st.dc, cmd)
		if ferr := st.dc.Flush(); ferr != nil && err == nil {
			err = ferr
		}
		st.mu.Unlock()
	}
	st.mu.Lock()
	c.closing.Store(true)
	_ = st.dc.Close()
	st.mu.Unlock()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	s.finish(c, err)
}

// closeStreams closes the streamed connections, which redcon no longer
// knows of, on shutdown.
func (s *Server) closeStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if c.streamed.Load() {
			_ = c.rc.NetConn().Close()
		}
	}
}

var _ net.Conn = (*guardConn)(nil)
