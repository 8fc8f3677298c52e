package resp

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is one client connection: its protocol state and its reply writer.
// Replies are buffered and written after each batch of commands.
type Conn struct {
	rc      *wire
	srv     *Server
	id      uint64
	created time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	guard   *guardConn  // nil if the listener is not guarded
	authTTL *time.Timer // closes the connection if it has not authenticated in time

	closing atomic.Bool // Close was called: run no further command

	stream *stream // set by Stream, in the handler's goroutine

	// CLIENT REPLY, read and changed by the connection's goroutine only.
	replyOff bool // OFF: no command's replies are written until ON
	skipNext bool // SKIP: the next command's replies are not written

	// MULTI's queue (multi.go), read and changed by the connection's goroutine only.
	tx        *tx  // nil: not in a transaction
	inExec    bool // the command served runs from EXEC's queue
	authFails int  // wrong passwords sent (authfail.go); RESET keeps it

	// State is the Session's per-connection value.
	State any

	mu      sync.Mutex // guards the fields below, read by CLIENT LIST
	proto   int
	db      int // SELECT's database, 0..Databases-1
	authed  bool
	user    string // the authenticated user; "" is the default user
	name    string
	libName string
	libVer  string
	lastCmd string
	subs    [3]map[string]struct{} // subscribed channels, patterns and shard channels (by pubsub.Kind)
}

// setAuthed records whether c has authenticated. Until it has, the guard
// applies the unauthenticated limits and a timer closes the connection
// after Limits.AuthTimeout. c.mu is held, or c is not yet shared.
func (c *Conn) setAuthed(v bool) {
	c.authed = v
	if c.guard == nil {
		return
	}
	c.guard.authed.Store(v)
	if c.authTTL != nil {
		c.authTTL.Stop()
		c.authTTL = nil
	}
	if !v {
		g := c.guard
		c.authTTL = time.AfterFunc(c.srv.Limits().AuthTimeout, func() { _ = g.Close() })
	}
}

// ID is the connection's unique id (CLIENT ID).
func (c *Conn) ID() uint64 { return c.id }

// Context is cancelled when the connection closes.
func (c *Conn) Context() context.Context { return c.ctx }

// RemoteAddr is the client's address.
func (c *Conn) RemoteAddr() string { return c.rc.RemoteAddr() }

// Proto is the protocol version in use, 2 or 3.
func (c *Conn) Proto() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proto
}

// DB is the database the client selected (SELECT), 0 by default.
func (c *Conn) DB() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.db
}

// Name is the client's name (CLIENT SETNAME, HELLO SETNAME).
func (c *Conn) Name() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.name
}

// Close closes the connection after flushing pending replies.
func (c *Conn) Close() {
	c.closing.Store(true)
	c.rc.Close()
}

// Replying reports whether the replies written now reach the client: not
// while CLIENT REPLY OFF holds, nor for the command after CLIENT REPLY SKIP.
// A command whose reply another goroutine writes later (Sink) keeps what
// Replying said when it was served.
func (c *Conn) Replying() bool { return !c.rc.quiet }

// SetReplying makes the replies written next reach the client or not, and
// returns the previous setting, which the caller restores.
func (c *Conn) SetReplying(on bool) (was bool) {
	was = !c.rc.quiet
	c.rc.quiet = !on
	return was
}

// beginReplies applies CLIENT REPLY to the command about to be served.
func (c *Conn) beginReplies() {
	c.rc.quiet = c.replyOff || c.skipNext
	c.skipNext = false
}

// clientReply is CLIENT REPLY ON|OFF|SKIP, as Redis 7.0 does it: ON
// replies OK, OFF and SKIP reply nothing, SKIP while OFF does nothing.
func (c *Conn) clientReply(args [][]byte) {
	if len(args) != 3 {
		c.Error("ERR wrong number of arguments for 'client|reply' command")
		return
	}
	switch strings.ToUpper(string(args[2])) {
	case "ON":
		c.replyOff, c.skipNext = false, false
		c.rc.quiet = false
		c.OK()
	case "OFF":
		c.replyOff = true
		c.rc.quiet = true
	case "SKIP":
		c.skipNext = !c.replyOff
	default:
		c.Error("ERR syntax error")
	}
}

// Raw writes a reply already encoded in RESP, as is.
func (c *Conn) Raw(b []byte) { c.rc.WriteRaw(b) }

func (c *Conn) isAuthed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.authed
}

// OK writes +OK.
func (c *Conn) OK() { c.rc.WriteString("OK") }

// Simple writes a simple string.
func (c *Conn) Simple(s string) { c.rc.WriteString(s) }

// Error writes an error; msg starts with its code ("ERR ...", "NOQUORUM ...").
func (c *Conn) Error(msg string) { c.rc.WriteError(msg) }

// Bulk writes a bulk string.
func (c *Conn) Bulk(b []byte) { c.rc.WriteBulk(b) }

// BulkString writes a bulk string.
func (c *Conn) BulkString(s string) { c.rc.WriteBulkString(s) }

// Int writes an integer.
func (c *Conn) Int(n int64) { c.rc.WriteInt64(n) }

// Array writes the header of an array of n elements.
func (c *Conn) Array(n int) { c.rc.WriteArray(n) }

// Map writes the header of a map of n pairs: a RESP3 map, or a flat array
// of 2n elements in RESP2.
func (c *Conn) Map(n int) {
	if c.Proto() == 3 {
		c.rc.WriteRaw(strconv.AppendInt([]byte{'%'}, int64(n), 10))
		c.rc.WriteRaw(crlf)
		return
	}
	c.rc.WriteArray(2 * n)
}

// Null writes a null reply where a bulk string was expected ($-1 or _).
func (c *Conn) Null() {
	if c.Proto() == 3 {
		c.rc.WriteRaw(null3)
		return
	}
	c.rc.WriteNull()
}

// NullArray writes a null reply where an array was expected (*-1 or _).
func (c *Conn) NullArray() {
	if c.Proto() == 3 {
		c.rc.WriteRaw(null3)
		return
	}
	c.rc.WriteRaw(nullArray2)
}

var (
	crlf       = []byte("\r\n")
	null3      = []byte("_\r\n")
	nullArray2 = []byte("*-1\r\n")
)
