package resp

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// WatchClose starts watching the client's socket while the current command
// blocks. gone is closed when the client closes the connection (EOF or a read
// error) or when a complete QUIT command (any letter case, RESP or inline)
// arrives. Bytes that arrive meanwhile are kept, in order, and redcon reads
// them after the handler returns, so pipelined commands are not lost. stop
// ends the watch and must be called before the handler returns; it waits
// until the watching goroutine has stopped reading. Calling WatchClose on a
// connection that is not guarded returns a gone that never closes.
//
// A QUIT already pipelined behind the current command closes gone at once.
// The watch keeps at most Limits.MaxRequest bytes; once that many wait, it
// stops reading and gone closes only if a QUIT is among them, so a client
// that closes after flooding is noticed when redcon reads again. Frames are
// checked against the limits when redcon reads them; no QUIT after a frame
// the guard will refuse counts. The connection's read deadline does not
// apply while watching and is restored by stop.
//
// WatchClose and stop must be called from the handler's goroutine. A
// WatchClose while a watch runs returns that watch's gone and a stop that
// does nothing. gone may never close: wait on it together with a deadline.
func (c *Conn) WatchClose() (gone <-chan struct{}, stop func()) {
	g, ok := c.rc.NetConn().(*guardConn)
	if !ok {
		return make(chan struct{}), func() {}
	}
	return g.watchClose()
}

// watch is a goroutine reading a guarded connection's socket into its
// lookahead while redcon does not.
type watch struct {
	g       *guardConn
	fr      framer // frames what the watch reads, to find a QUIT
	framing bool   // fr has met no frame the guard will refuse
	gone    chan struct{}
	done    chan struct{} // closed when the goroutine has stopped reading
	once    sync.Once
}

func (g *guardConn) watchClose() (<-chan struct{}, func()) {
	if w := g.watch; w != nil {
		return w.gone, func() {}
	}
	w := &watch{g: g, fr: g.framer, framing: g.err == nil, gone: make(chan struct{}), done: make(chan struct{})}
	w.frame(g.look) // read by an earlier watch, not yet by redcon
	if w.fr.quit || g.lookErr != nil {
		close(w.gone)
		return w.gone, func() {}
	}
	if err := g.Conn.SetReadDeadline(time.Time{}); err != nil {
		// Closed already, or a conn without deadlines: stop could not end a Read.
		if errors.Is(err, net.ErrClosed) {
			close(w.gone)
		}
		return w.gone, func() {}
	}
	g.watch = w
	go w.run()
	return w.gone, w.stop
}

// run reads until gone closes, the lookahead is full or stop's deadline
// ends a Read.
func (w *watch) run() {
	defer close(w.done)
	g := w.g
	for len(g.look) < g.lim.MaxRequest {
		n, err := g.Conn.Read(w.room())
		g.look = g.look[:len(g.look)+n]
		w.frame(g.look[len(g.look)-n:])
		switch {
		case w.fr.quit:
			close(w.gone)
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			return // stopped
		case err != nil:
			g.lookErr = err
			close(w.gone)
			return
		}
	}
}

// room returns the free end of the lookahead, which grows to MaxRequest bytes.
func (w *watch) room() []byte {
	g := w.g
	if len(g.look) == cap(g.look) {
		look := make([]byte, len(g.look), min(max(2*len(g.look), 4096), g.lim.MaxRequest))
		copy(look, g.look)
		g.look = look
	}
	return g.look[len(g.look):cap(g.look)]
}

// frame frames b, which follows what fr has framed, until a frame breaks a
// limit or is malformed: redcon will get no further.
func (w *watch) frame(b []byte) {
	if !w.framing {
		return
	}
	if _, err := w.fr.scan(b); err != nil {
		w.framing = false
	}
}

// stop ends the watch: a read deadline in the past ends the goroutine's
// Read, and the deadline set before is restored once it has returned.
func (w *watch) stop() {
	w.once.Do(func() {
		g := w.g
		_ = g.Conn.SetReadDeadline(time.Unix(1, 0))
		<-w.done // a net.Conn's Read returns once its deadline passes
		var t time.Time
		if p := g.rdl.Load(); p != nil {
			t = *p
		}
		_ = g.Conn.SetReadDeadline(t)
		g.watch = nil
	})
}

// readAhead reads what a watch read, then the error that ended it, and then
// the socket.
func (g *guardConn) readAhead(p []byte) (int, error) {
	if len(g.look) > 0 {
		n := copy(p, g.look)
		if g.look = g.look[n:]; len(g.look) == 0 {
			g.look = nil
		}
		return n, nil
	}
	if g.lookErr != nil {
		return 0, g.lookErr
	}
	return g.Conn.Read(p)
}

// SetReadDeadline sets the read deadline, which a watch restores when it stops.
func (g *guardConn) SetReadDeadline(t time.Time) error {
	g.rdl.Store(&t)
	return g.Conn.SetReadDeadline(t)
}

// SetDeadline sets the read and write deadlines.
func (g *guardConn) SetDeadline(t time.Time) error {
	g.rdl.Store(&t)
	return g.Conn.SetDeadline(t)
}
