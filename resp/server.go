package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/pubsub"
)

// Config configures the server.
type Config struct {
	// Password, when set, is required by AUTH or HELLO AUTH before other
	// commands run.
	Password string
	// MaxClients bounds the open connections (default 10000).
	MaxClients int
	// Limits bound what one client may send.
	Limits Limits
	// Version is lockproxy's version, shown by INFO.
	Version string
	// ProtectedMode refuses clients that are not on the loopback interface
	// while no password is set, as Redis does.
	ProtectedMode bool
	// IsLocal decides whether a client's address is on this host, for
	// protected mode; nil means IsLoopback. Tests replace it.
	IsLocal func(addr string) bool
	// TLS, when set, makes the listener speak TLS only.
	TLS *tls.Config
	// Route, when set, sees each authenticated command before the table
	// and returns true when it answered it (passthrough to a data Redis).
	Route func(c *Conn, args [][]byte) bool
	// Watcher serves WATCH for EXEC (multi.go); nil: EXEC checks nothing.
	Watcher TxWatcher
	// PubSub carries PUBLISH to SUBSCRIBE clients; nil: a hub of this
	// process only.
	PubSub *pubsub.Hub
}

// Session learns of connections' lives; commands/ implements it.
type Session interface {
	Opened(c *Conn)
	// Reset runs on RESET: the connection goes back to its state when new.
	Reset(c *Conn)
	// Closed runs once when the connection is gone, however it closed.
	Closed(c *Conn)
	// Info appends INFO sections to the server's own for section.
	Info(section string) string
}

// Server is a RESP server.
type Server struct {
	cfg     Config
	table   *Table
	hub     *pubsub.Hub
	session Session
	log     *zap.Logger
	started time.Time

	nextID  atomic.Uint64
	clients atomic.Int64
	handled sync.WaitGroup // Closed callbacks still running

	pass      atomic.Pointer[string] // the password; SetPassword changes it
	fullLog   rateLog                // refusals at max_clients
	attackLog rateLog                // HTTP requests closed
	tlsLog    rateLog                // failed TLS handshakes
	acceptLog rateLog                // failed accepts
	authLog   rateLog                // wrong passwords (authfail.go)
	closeLog  rateLog                // connections closed on an error (ratelog.go)

	authFailures atomic.Int64 // wrong passwords since start

	users  atomic.Pointer[map[string]*User] // by name; SetUsers changes them
	shares shares                           // restricted users' blocked calls (acl.go)

	// The limits in force; SetLimits changes them. cfg's are the first.
	limits     atomic.Pointer[Limits]
	maxClients atomic.Int64
	budget     *budget // MaxBuffered, shared by the listener's connections

	mu    sync.Mutex
	conns map[uint64]*Conn
	lns   []net.Listener // Serve's listeners, closed by Close
	shut  bool           // Close was called
}

// NewServer returns a server dispatching through table, to which it adds
// the handshake commands.
func NewServer(cfg Config, table *Table, session Session, log *zap.Logger) (*Server, error) {
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = 10000
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	s := &Server{cfg: cfg, table: table, session: session, log: log, started: time.Now(), conns: map[uint64]*Conn{}, hub: cfg.PubSub}
	if s.hub == nil {
		s.hub = pubsub.New()
	}
	s.budget = newBudget(cfg.Limits.MaxBuffered)
	s.SetLimits(cfg.MaxClients, cfg.Limits)
	s.SetPassword(cfg.Password)
	s.fullLog.every, s.attackLog.every, s.tlsLog.every, s.acceptLog.every = refusalLogEvery, refusalLogEvery, refusalLogEvery, refusalLogEvery
	s.authLog.every, s.closeLog.every = refusalLogEvery, refusalLogEvery
	if err := table.Add(append(append(append(s.handshake(), s.httpCommands()...), s.pubsubCommands()...), s.txCommands()...)...); err != nil {
		return nil, err
	}
	return s, nil
}

// Serve accepts connections on ln until Close. It returns nil after Close.
// Each connection is served by a goroutine of its own (serveConn): redcon
// parses its commands, the loop reads and writes them.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.TLS != nil {
		ln = newTLSListener(ln, s.cfg.TLS, s)
	}
	gl := &guardListener{Listener: ln, src: &s.limits, budget: s.budget}
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.lns = append(s.lns, gl)
	s.mu.Unlock()
	var wait time.Duration
	for {
		nc, err := gl.Accept()
		switch {
		case err == nil:
			wait = 0
			s.open(nc.(*guardConn))
		case errors.Is(err, net.ErrClosed) || s.isShut():
			return nil
		default: // out of file descriptors, say: try again, as net/http does
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			if ok, dropped := s.acceptLog.allow(); ok {
				s.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("retry_in", wait), zap.Int("not_logged_since_last", dropped))
			}
			time.Sleep(wait)
		}
	}
}

func (s *Server) isShut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shut
}

// Close stops accepting, closes every connection and waits until their
// Closed callbacks (which release connection-bound locks) have run or ctx
// is done.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.shut = true
	lns := s.lns
	for _, c := range s.conns {
		_ = c.rc.g.Abort() // its loop's read fails, and it finishes
	}
	s.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	done := make(chan struct{})
	go func() { s.handled.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refusalLogEvery is the least time between two log lines about refused
// connections of one kind.
const refusalLogEvery = 10 * time.Second

// SetPassword changes the password new connections and AUTH need; empty
// turns authentication off. Authenticated connections stay so.
func (s *Server) SetPassword(p string) { s.pass.Store(&p) }

func (s *Server) password() string { return *s.pass.Load() }

// SetLimits changes the limits, as NewServer applies them: every
// connection's next command is read under them, a connection is accepted
// while fewer than maxClients are open, and the idle timeout counts from
// each connection's next read. A connection still waiting to authenticate
// keeps its AuthTimeout; connections that open later get the new one.
// Lowering maxClients or MaxBuffered closes no connection and frees no
// buffered byte: they apply to what comes next.
func (s *Server) SetLimits(maxClients int, l Limits) {
	if maxClients <= 0 {
		maxClients = 10000
	}
	l = l.WithDefaults()
	s.limits.Store(&l)
	s.budget.max.Store(int64(l.MaxBuffered))
	s.maxClients.Store(int64(maxClients))
}

// Limits are the limits in force (SetLimits).
func (s *Server) Limits() Limits { return *s.limits.Load() }

// Clients is the number of open connections.
func (s *Server) Clients() int { return int(s.clients.Load()) }

// open admits a connection that the listener accepted, or refuses it with
// an error reply, and starts its loop.
func (s *Server) open(g *guardConn) {
	w := newWire(g)
	c, refusal := s.accept(w)
	if c == nil {
		w.WriteError(refusal)
		_ = w.Close()
		return
	}
	go s.serveConn(c)
}

// accept makes the Conn of an admitted connection, or says why it is refused.
func (s *Server) accept(w *wire) (*Conn, string) {
	if s.denied(w.RemoteAddr()) {
		return nil, msgDenied
	}
	if maxClients := s.maxClients.Load(); s.clients.Add(1) > maxClients {
		s.clients.Add(-1)
		if ok, dropped := s.fullLog.allow(); ok {
			s.log.Warn("connection refused: max number of clients reached", zap.String("addr", w.RemoteAddr()),
				zap.Int64("max_clients", maxClients), zap.Int("refused_not_logged_since_last", dropped))
		}
		return nil, "ERR max number of clients reached"
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{rc: w, srv: s, id: s.nextID.Add(1), created: time.Now(), ctx: ctx, cancel: cancel, proto: 2, guard: w.g}
	c.setAuthed(s.password() == "")
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		s.clients.Add(-1)
		cancel()
		if c.authTTL != nil {
			c.authTTL.Stop()
		}
		return nil, "ERR server is shutting down"
	}
	s.conns[c.id] = c
	s.mu.Unlock()
	s.handled.Add(1)
	s.session.Opened(c)
	return c, ""
}

// serveConn is a connection's loop: it reads a batch of commands (all
// that one read brought), serves them in order and writes their replies
// at once, until the client leaves, a command closes the connection or a
// read breaks a limit. A connection that streams (Conn.Stream) is served a
// command at a time, each one's replies written before the next is read,
// under the stream's write turn.
func (s *Server) serveConn(c *Conn) {
	err := s.serveCommands(c)
	if c.rc.sink != nil {
		c.rc.sink.Wait() // the replies other goroutines still write
	}
	if c.stream != nil {
		c.stream.mu.Lock() // no Write is under way, nor starts
	}
	c.closing.Store(true)
	_ = c.rc.g.Close()
	if c.stream != nil {
		c.stream.mu.Unlock()
	}
	c.rc.in.release()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	s.finish(c, err)
}

func (s *Server) serveCommands(c *Conn) error {
	w := c.rc
	var raws [][]byte
	var cmds []redcon.Command
	for {
		var err error
		if raws, err = w.in.next(raws[:0]); err != nil {
			s.protocolError(c, err)
			return err
		}
		var perr error
		cmds, perr = parseBatch(cmds[:0], raws)
		for _, cmd := range cmds {
			if len(cmd.Args) == 0 { // as Redis, a blank line is served as no command: it ends a CLIENT REPLY SKIP
				c.skipNext = false
				continue
			}
			s.serve(c, cmd)
			if c.closing.Load() || w.closed {
				c.turn(func() { _ = w.Flush() })
				return nil
			}
		}
		if perr != nil { // as Redis: the commands before it are served, then the error, then the connection closes
			c.turn(func() {
				c.Error("ERR " + perr.Error())
				_ = w.Flush()
			})
			return perr
		}
		clear(cmds) // an idle connection keeps no batch's bytes
		clear(raws)
		if c.stream == nil {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// parseBatch parses the raw commands of a batch, a blank line (no
// command) as one without arguments, up to the first that redcon rejects,
// whose error it returns: what follows that one is never served.
func parseBatch(cmds []redcon.Command, raws [][]byte) ([]redcon.Command, error) {
	for _, raw := range raws {
		cmd, ok, err := parseCommand(raw)
		if err != nil {
			return cmds, err
		}
		if !ok {
			cmd = redcon.Command{}
		}
		cmds = append(cmds, cmd)
	}
	return cmds, nil
}

// protocolError answers input that redcon's parser rejects (the guard has
// let it through up to the byte where redcon rejects it) with redcon's
// error.
func (s *Server) protocolError(c *Conn, err error) {
	if perr := c.rc.in.rejected(err); perr != nil {
		c.turn(func() {
			c.Error("ERR " + perr.Error())
			_ = c.rc.Flush()
		})
	}
}

// finish runs once a connection is gone: its counters, its state and the
// Closed callbacks.
func (s *Server) finish(c *Conn, err error) {
	defer s.handled.Done()
	s.clients.Add(-1)
	c.cancel()
	if c.authTTL != nil {
		c.authTTL.Stop()
	}
	s.mu.Lock()
	delete(s.conns, c.id)
	s.mu.Unlock()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.closedOnError(c, err)
	}
	s.endTx(c)
	s.session.Closed(c) // releases bound locks first: leaving the nodes' channels may wait on a slow node
	s.unsubscribeAll(c)
}

// serve dispatches one command. Once a handler called Conn.Stream, each
// command runs under the stream's write turn and its replies are written
// before the next is read; the replies buffered before are written, and
// the turn the handler kept given up, once that handler returns.
func (s *Server) serve(c *Conn, cmd redcon.Command) {
	st := c.stream
	if st != nil {
		st.mu.Lock()
	}
	c.beginReplies()
	s.dispatch(c, cmd)
	c.rc.quiet = false // what is written between commands is no command's reply
	if st == nil {
		st = c.stream // Stream was called: it holds the turn
	}
	if st != nil {
		_ = c.rc.Flush() // a failed write shows on the next read
		st.mu.Unlock()
	}
}

func (s *Server) dispatch(c *Conn, cmd redcon.Command) {
	if c.closing.Load() {
		return // closed by an earlier command of the same batch (QUIT, POST)
	}
	args := cmd.Args
	authed := c.isAuthed()
	if s.tooBig(c, args, authed) {
		return
	}
	// Only the default user reaches the data Redis: an ACL user is confined
	// to the lock commands its entry allows.
	if s.cfg.Route != nil && authed && !c.restricted() && s.cfg.Route(c, args) {
		return
	}
	def := s.table.lookup(args[0])
	if def == nil {
		s.reject(c, nil, unknownCommand(args))
		return
	}
	c.mu.Lock()
	c.lastCmd = def.Name
	c.mu.Unlock()
	switch {
	case !authed && def.Flags&NoAuth == 0:
		s.reject(c, def, "NOAUTH Authentication required.")
	case !def.arityOK(len(args)):
		s.reject(c, def, "ERR wrong number of arguments for '"+def.Name+"' command")
	case c.refusedSubscribed(def.Name) != "":
		c.Error(c.refusedSubscribed(def.Name))
	default:
		if e := s.noPerm(c, def, args); e != "" {
			s.reject(c, def, e)
			return
		}
		if c.queues(def) {
			s.enqueue(c, def, args)
			return
		}
		release, e := s.takeShare(c, def, args)
		if e != "" {
			c.Error(e)
			return
		}
		defer release()
		inDB(c.DB(), def, args)
		def.Handler(c, args)
	}
}

// tooBig refuses a command with more arguments, or a longer one, than the
// limits allow, as Redis does, closing the connection. The guard checks RESP
// headers before the bytes arrive; this check is the one for inline commands.
func (s *Server) tooBig(c *Conn, args [][]byte, authed bool) bool {
	lim := s.Limits()
	if !authed {
		lim = lim.unauthenticated()
	}
	reply := tooBigFor(lim, args, authed)
	if reply == "" {
		return false
	}
	c.Error(strings.TrimSuffix(reply[1:], "\r\n"))
	c.Close()
	return true
}

// tooBigFor is the error reply (RESP) for a command with more arguments,
// or a longer one, than lim allows; "" when it is within them.
func tooBigFor(lim Limits, args [][]byte, authed bool) string {
	for _, a := range args {
		if len(a) > lim.MaxBulk {
			return replyFor(&LimitError{Err: ErrBulkTooLong, Limit: lim.MaxBulk}, stFrame, authed)
		}
	}
	if len(args) > lim.MaxArgs {
		return replyFor(&LimitError{Err: ErrTooManyArgs, Limit: lim.MaxArgs}, stFrame, authed)
	}
	return ""
}

// unknownCommand is Redis's error for a command it does not know.
func unknownCommand(args [][]byte) string {
	msg := "ERR unknown command '" + clip(args[0]) + "', with args beginning with: "
	for _, a := range args[1:] {
		msg += "'" + clip(a) + "' "
	}
	return msg
}

// clip shortens a client's argument for an error message, as Redis does.
func clip(b []byte) string {
	if len(b) > 128 {
		b = b[:128]
	}
	return sanitize(b)
}

// sanitize replaces bytes that would break a RESP error line.
func sanitize(b []byte) string {
	out := []byte(nil)
	for _, ch := range b {
		if ch == '\r' || ch == '\n' {
			ch = ' '
		}
		out = append(out, ch)
	}
	return string(out)
}
