package resp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/tidwall/redcon"
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
// The watch keeps at most Limits.MaxRequest bytes, held from the MaxBuffered
// budget; once that many wait, it stops reading, and gone closes only if a
// QUIT is among them. No QUIT after a command the guard will refuse counts.
// The idle timeout does not run while watching.
//
// WatchClose and stop must be called from the handler's goroutine. A
// WatchClose while a watch runs returns that watch's gone and a stop that
// does nothing. gone may never close: wait on it together with a deadline.
//
// On a streamed connection (Stream) the handler gives up the write turn
// until stop, so that what other goroutines write (relayed pub/sub pushes)
// reaches the client while the command blocks, as Redis delivers pushes to
// a blocked client; the handler must write nothing before stop.
func (c *Conn) WatchClose() (gone <-chan struct{}, stop func()) {
	g, ok := c.rc.NetConn().(*guardConn)
	if !ok {
		return make(chan struct{}), func() {}
	}
	st, nested := c.stream, g.watch != nil
	gone, unwatch := g.watchClose()
	if st == nil || nested {
		return gone, unwatch
	}
	st.mu.Unlock()
	held := false
	return gone, func() {
		unwatch()
		if !held {
			held = true
			st.mu.Lock()
		}
	}
}

// UntilClose is ctx, ended also when the client closes the connection or
// sends QUIT (WatchClose): what a blocking command waits under. cancel
// ends ctx and the watch; it must be called, from the handler's goroutine,
// and may be called more than once.
func (c *Conn) UntilClose(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	gone, stop := c.WatchClose()
	go func() {
		select {
		case <-gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	var once sync.Once
	return ctx, func() {
		cancel()
		once.Do(stop)
	}
}

// watch is a goroutine reading a guarded connection's socket into its
// lookahead while redcon does not.
type watch struct {
	g       *guardConn
	fr      framer // frames what the watch reads, to find a QUIT
	framing bool   // fr has met no command the guard will refuse
	gone    chan struct{}
	done    chan struct{} // closed when the goroutine has stopped reading
	stopped bool
}

func (g *guardConn) watchClose() (<-chan struct{}, func()) {
	if w := g.watch; w != nil {
		return w.gone, func() {}
	}
	w := &watch{g: g, fr: g.fr.clone(), framing: g.err == nil, gone: make(chan struct{}), done: make(chan struct{})}
	w.frame(g.look) // not yet returned to redcon
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

// watchChunk is the most one Read of a watch asks for.
const watchChunk = 16 << 10

// run reads until gone closes, the lookahead is full, the budget is spent
// or stop's deadline ends a Read.
func (w *watch) run() {
	defer close(w.done)
	g := w.g
	buf := make([]byte, watchChunk)
	for room := min(watchChunk, g.lim.MaxRequest-len(g.look)); room > 0; room = min(watchChunk, g.lim.MaxRequest-len(g.look)) {
		n, err := g.Conn.Read(buf[:room])
		g.hold(n, false) // the bytes are read: over the budget or not
		g.look = append(g.look, buf[:n]...)
		w.frame(buf[:n])
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
		case g.budget.used.Load() > g.budget.max.Load():
			return // no more until redcon reads
		}
	}
}

// frame frames b, which follows what fr has framed, until a command breaks
// a limit or is malformed: redcon will get no further.
func (w *watch) frame(b []byte) {
	if !w.framing {
		return
	}
	lim := w.g.lim
	if !w.g.authed.Load() {
		lim = lim.unauthenticated()
	}
	_, _, err := w.fr.scan(b, &lim, false)
	w.fr.ends = w.fr.ends[:0] // a watch needs no ends
	if err != nil {
		w.framing = false
	}
}

// stop ends the watch: a read deadline in the past ends the goroutine's
// Read. The next Read of the guard sets the deadline again.
func (w *watch) stop() {
	if w.stopped {
		return
	}
	w.stopped = true
	_ = w.g.Conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done // a net.Conn's Read returns once its deadline passes
	_ = w.g.Conn.SetReadDeadline(time.Time{})
	w.g.watch = nil
}

// clone returns a copy of f that shares no memory with it.
func (f *framer) clone() framer {
	c := *f
	c.line = bytes.Clone(f.line)
	c.head = bytes.Clone(f.head)
	c.ends = nil
	return c
}

// isQuit reports whether the well-formed command just framed is QUIT, in
// any letter case, as the command table finds it. An inline line longer
// than headLen counts only if it starts with "quit " unquoted.
func (f *framer) isQuit() bool {
	h := f.head
	switch {
	case h[0] == '*':
		return f.firstLen == 4 && f.firstAt+4 <= len(h) && bytes.EqualFold(h[f.firstAt:f.firstAt+4], quit)
	case len(h) < headLen: // the whole line, '\n' included
		cmd, err := redcon.Parse(h)
		return err == nil && bytes.EqualFold(cmd.Args[0], quit)
	}
	return bytes.EqualFold(h[:4], quit) && h[4] == ' '
}

var quit = []byte("quit")

// Left reports whether the client has closed the connection or sent QUIT,
// giving the socket up to d to say so; what the client sent meanwhile is
// kept for redcon, as a watch keeps it. It is for a handler about to
// deliver something a client that left would lose: the socket is read in
// the handler's goroutine, so a close that already reached this host is
// seen however busy the machine is (on plain TCP without waiting: a peek at
// the socket; under TLS, or with bytes waiting, by reading). Call it from the handler's goroutine
// with no watch running (after stop). It waits the whole of d when the
// client is still there.
func (c *Conn) Left(d time.Duration) bool {
	g, ok := c.rc.NetConn().(*guardConn)
	if !ok || g.watch != nil {
		return false
	}
	w := &watch{g: g, fr: g.fr.clone(), framing: g.err == nil, gone: make(chan struct{}), done: make(chan struct{})}
	w.frame(g.look)
	if w.fr.quit || g.lookErr != nil {
		return true
	}
	if closed, known := peerClosed(g.Conn); known {
		return closed
	}
	if err := g.Conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return errors.Is(err, net.ErrClosed)
	}
	w.run()
	_ = g.Conn.SetReadDeadline(time.Time{})
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

// peerClosed peeks at a TCP socket without blocking or consuming: known is
// false when c is not plain TCP or bytes wait (a read must tell), closed is
// true when the client closed or reset the connection.
func peerClosed(c net.Conn) (closed, known bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var n int
	var rerr error
	buf := make([]byte, 1)
	if err := raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}); err != nil {
		return errors.Is(err, net.ErrClosed), errors.Is(err, net.ErrClosed)
	}
	switch {
	case rerr == nil && n == 0:
		return true, true // end of stream
	case errors.Is(rerr, syscall.EAGAIN):
		return false, true // open, nothing sent
	case rerr != nil:
		return true, true // reset
	}
	return false, false
}
