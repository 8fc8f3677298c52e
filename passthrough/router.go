package passthrough

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/resp"
)

// Config configures the data Redis and which keys are locks.
type Config struct {
	Addr     string      // host:port of the data Redis
	Password string      // its AUTH password; empty: none
	Username string      // its ACL user, with Password; empty: default
	DB       int         // database selected on each new upstream connection
	TLS      *tls.Config // nil: plain TCP
	// LockKeys are glob patterns (Redis's syntax) of the keys that are
	// locks; empty: every lock-shaped command is a lock.
	LockKeys []string
	// Timeout bounds a dial and each non-blocking command (default 5s).
	Timeout time.Duration
}

// Stats counts forwarded commands.
type Stats struct {
	Forwarded atomic.Int64 // commands sent to the data Redis
	Failed    atomic.Int64 // of which got no reply: the data Redis could not be reached or broke off
	StateLost atomic.Int64 // clients closed because their state on the data Redis was lost
}

// Router sends each command to the lock service or the data Redis.
type Router struct {
	cfg     Config
	locks   matcher
	stats   Stats
	scripts lockSHAs // catalogued scripts seen, by SHA1 (scripts.go)

	mu      sync.Mutex
	clients map[uint64]*client

	smu    sync.Mutex
	shared map[int][]*shared // by protocol version: connections plain commands share
}

// client is one client connection's forwarding state.
type client struct {
	up    *upConn // dedicated upstream connection; nil until needed
	multi bool    // a MULTI was forwarded and not yet ended
	dirty bool    // a command of the transaction was refused: EXEC aborts
	subAt bool    // the transaction subscribes: a relay starts after EXEC
	// The client's other state on up, which is lost with it (state.go).
	watching bool    // a WATCH was forwarded and not yet ended
	db       int     // the database selected on up
	settings bool    // CLIENT TRACKING, NO-TOUCH or CACHING was forwarded
	sub      *relay  // pub/sub or MONITOR relay on up; nil when not in that mode
	shared   *shared // the shared connection the client's last command went through
	sink     *resp.Sink
}

// maxQueued bounds the commands of one client's pipeline in flight at once
// on a shared connection, and maxBacklog the bytes of their replies not
// yet written (a client that does not read): beyond, the client waits for
// them before its next command is sent.
const (
	maxQueued  = 256
	maxBacklog = 1 << 20
)

// New returns a router for cfg.
func New(cfg Config) *Router {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Router{cfg: cfg, locks: cfg.LockKeys, clients: map[uint64]*client{}, shared: map[int][]*shared{}}
}

// Stats are the router's counters.
func (r *Router) Stats() *Stats { return &r.stats }

// Route handles args when it is not a lock operation, forwarding it, and
// returns false when the lock service must serve it. resp calls it for each
// authenticated command, in order, from the connection's goroutine.
func (r *Router) Route(c *resp.Conn, args [][]byte) bool {
	name := strings.ToLower(string(args[0]))
	st := r.client(c)
	dest, channels := r.classifyChannels(c, name, args)
	if !channels {
		dest = r.classify(name, args)
	}
	if refused := r.otherSide(c, st, name, dest); refused != "" {
		c.Error(refused)
		return true
	}
	if st.sub != nil {
		return r.routeRelayed(c, st, name, args, dest)
	}
	if dest == toData && r.shareable(st, name) {
		r.queue(c, st, args)
		return true
	}
	r.flush(c, st) // earlier replies first, whoever writes the next one
	if name == "reset" {
		r.reset(st)
		return false
	}
	if dest == toData && streams[name] {
		r.enterRelay(c, st, name, args)
		return true
	}
	if dest == toData && name == "client" {
		r.clientCmd(c, st, args)
		return true
	}
	return r.dispatch(c, st, name, args, dest)
}

// dispatch handles a command of a client not in relay mode.
func (r *Router) dispatch(c *resp.Conn, st *client, name string, args [][]byte, dest destination) bool {
	switch dest {
	case refused:
		c.Error("ERR lockproxy does not forward '" + name + "' to the data Redis (a replication stream)")
	case toLocks:
		if name == "watch" { // transactions run on the data Redis, which cannot see lock keys change
			c.Error("ERR lockproxy: WATCH of a lock key is not served with a data Redis: transactions run there, and lock commands cannot join them")
			return true
		}
		if !st.multi {
			return false
		}
		st.dirty = true
		if name == "client" && isClientReply(args) {
			c.Error("ERR lockproxy: CLIENT REPLY cannot join a transaction of the data Redis")
			return true
		}
		c.Error("ERR lockproxy: '" + name + "' is a lock operation and cannot join a transaction of the data Redis")
	case mixed:
		st.dirty = st.dirty || st.multi
		c.Error("ERR lockproxy: '" + name + "' names both lock keys and data keys; send them as separate commands")
	default:
		r.forward(c, st, name, args)
	}
	return true
}

type destination int

const (
	toData destination = iota
	toLocks
	mixed
	refused
)

// classify decides where a command goes.
func (r *Router) classify(name string, args [][]byte) destination {
	if d, ok := r.classifyScript(name, args); ok {
		return d
	}
	if name == "client" {
		return clientDest(args)
	}
	if local[name] {
		return toLocks
	}
	if unrelayed[name] {
		return refused
	}
	if len(r.locks) == 0 {
		return r.lockShaped(name, args)
	}
	keys, n := keysOf(name, args), 0
	for _, k := range keys {
		if r.locks.isLock(k) {
			n++
		}
	}
	switch {
	case n == 0:
		return toData
	case n == len(keys):
		return toLocks
	}
	return mixed
}

// lockShaped is the routing without lock_keys: SET NX and SETNX are
// locks, as without a data Redis, and so are catalogued scripts
// (classifyScript); the rest is data.
func (r *Router) lockShaped(name string, args [][]byte) destination {
	switch {
	case name == "set" && len(args) > 3 && hasNX(args), name == "setnx":
		return toLocks
	}
	return toData
}

// enterRelay puts the client in pub/sub (or MONITOR) mode on a connection
// of its own, where everything the data Redis sends is relayed as it comes.
func (r *Router) enterRelay(c *resp.Conn, st *client, name string, args [][]byte) {
	if st.multi {
		// Queued, as Redis queues it; the client is in pub/sub mode once
		// EXEC has subscribed it (MONITOR fails at EXEC, as on Redis).
		st.subAt = st.subAt || name != "monitor"
		r.forward(c, st, name, args)
		return
	}
	r.stats.Forwarded.Add(1)
	if st.up == nil {
		up, err := dial(r.cfg, c.Proto())
		if err != nil {
			r.fail(c, st, false, notSent(err))
			return
		}
		r.mu.Lock()
		st.up = up
		r.mu.Unlock()
	}
	if err := r.startRelay(c, st, args); err != nil {
		r.fail(c, st, false, err)
	}
}

// shareable reports whether a command may go over a shared connection:
// it leaves no state there and answers within the timeout.
func (r *Router) shareable(st *client, name string) bool {
	return st.up == nil && !st.multi && !blocking[name] && !stateful[name] && !streams[name]
}

// queue sends args on a shared connection without waiting for the reply,
// which that connection's reader writes to the client (resp.Sink), so that
// a client's pipeline goes upstream as one write and the client's goroutine
// reads its next command meanwhile. Each reply is written, or dropped, as
// CLIENT REPLY said when its command came. A client whose replies are not
// written as fast as it sends commands waits (maxQueued, maxBacklog).
func (r *Router) queue(c *resp.Conn, st *client, args [][]byte) {
	r.stats.Forwarded.Add(1)
	s, err := r.sharedFor(c.Proto(), c.ID())
	sink := c.Sink()
	if err != nil || sink == nil || s != st.shared {
		r.flush(c, st) // the replies of another connection's calls first
	}
	if err != nil {
		r.stats.Failed.Add(1)
		c.Error(replyText(r.cfg.Addr, notSent(err)))
		return
	}
	call := getCall(time.Now().Add(r.cfg.Timeout))
	if sink == nil { // a connection that streams writes its replies itself
		r.roundTrip(c, s, call, args)
		return
	}
	if n, b := sink.Pending(); n >= maxQueued || b >= maxBacklog {
		sink.Wait()
	}
	st.shared, st.sink = s, sink
	sink.Expect()
	call.sink, call.quiet = sink, !c.Replying()
	if err := s.send(call, args); err != nil {
		r.stats.Failed.Add(1)
		if sink.Put(redcon.AppendError(nil, replyText(r.cfg.Addr, err)), call.quiet) {
			sink.Flush()
		}
		putCall(call)
	}
}

// roundTrip sends call on s and writes its reply.
func (r *Router) roundTrip(c *resp.Conn, s *shared, call *call, args [][]byte) {
	defer putCall(call)
	err := s.send(call, args)
	var reply []byte
	if err == nil {
		reply, err = s.wait(call)
	}
	if err != nil {
		r.stats.Failed.Add(1)
		c.Error(replyText(r.cfg.Addr, err))
		return
	}
	c.Raw(reply) // copied: the call's buffer is reused
}

// flush waits until the replies of the client's commands sent on a shared
// connection were written. Every reply the client gets from elsewhere, and
// every command it sends elsewhere, comes after a flush, so no reply
// overtakes an earlier command's and no command overtakes an earlier one.
func (r *Router) flush(_ *resp.Conn, st *client) {
	if st.sink != nil {
		st.sink.Wait()
	}
}

// forward sends args on the client's dedicated upstream connection and
// relays the reply; the client waits for it, so replies keep the commands'
// order.
func (r *Router) forward(c *resp.Conn, st *client, name string, args [][]byte) {
	if name == "exec" && st.dirty {
		args, name = [][]byte{[]byte("DISCARD")}, "discard"
		defer c.Error("EXECABORT Transaction discarded because of previous errors.")
		defer func() { st.multi, st.dirty, st.subAt = false, false, false }()
		r.send(c, st, name, args, true)
		return
	}
	reply, ok := r.send(c, st, name, args, false)
	if !ok {
		return
	}
	st.note(name, args, reply)
	switch {
	case name == "multi" && bytes.HasPrefix(reply, []byte("+OK")):
		st.multi = true
	case name == "exec" && st.subAt:
		st.multi, st.dirty, st.subAt = false, false, false
		if channels, shard := subscriptionsIn(reply); channels+shard > 0 {
			r.relayAfterExec(c, st, channels, shard)
		}
	case name == "exec" || name == "discard":
		st.multi, st.dirty, st.subAt = false, false, false
	}
}

// send forwards args on the client's own upstream connection, dialled on
// first use, and writes the reply to c unless quiet.
func (r *Router) send(c *resp.Conn, st *client, name string, args [][]byte, quiet bool) ([]byte, bool) {
	r.stats.Forwarded.Add(1)
	if st.up == nil {
		up, err := dial(r.cfg, c.Proto())
		if err != nil {
			return nil, r.fail(c, st, quiet, notSent(err))
		}
		r.mu.Lock()
		st.up = up
		r.mu.Unlock()
	}
	var reply []byte
	var err error
	switch {
	case blocking[name] && !st.multi:
		reply, err = r.block(c, st.up, name, args)
	case blocking[name]: // queued by the transaction: answers at once
		reply, err = st.up.do(c.Proto(), args, 0)
	default:
		reply, err = st.up.do(c.Proto(), args, r.cfg.Timeout)
	}
	if err != nil {
		return nil, r.fail(c, st, quiet, err)
	}
	if !quiet {
		c.Raw(reply)
	}
	return reply, true
}

// sharedFor is the shared connection of client id in proto, dialled anew
// when missing or broken. There is one per CPU and protocol version.
func (r *Router) sharedFor(proto int, id uint64) (*shared, error) {
	r.smu.Lock()
	defer r.smu.Unlock()
	conns := r.shared[proto]
	if conns == nil {
		conns = make([]*shared, runtime.GOMAXPROCS(0))
		r.shared[proto] = conns
	}
	i := int(id % uint64(len(conns)))
	if conns[i] == nil || conns[i].broken() {
		u, err := dial(r.cfg, proto)
		if err != nil {
			return nil, err
		}
		conns[i] = newShared(u, r.cfg.Timeout)
		conns[i].addr, conns[i].failed = r.cfg.Addr, &r.stats.Failed
	}
	return conns[i], nil
}

// Close closes the shared connections.
func (r *Router) Close() {
	r.smu.Lock()
	defer r.smu.Unlock()
	for _, conns := range r.shared {
		for _, s := range conns {
			if s != nil {
				s.close()
			}
		}
	}
	r.shared = map[int][]*shared{}
}

// fail drops a broken upstream connection and tells the client, naming the
// data Redis. A client whose state there (a transaction, a WATCH, a
// database, client settings) went with it is then closed, as Redis closes
// a client whose connection it dropped: its next commands would otherwise
// run without that state.
func (r *Router) fail(c *resp.Conn, st *client, quiet bool, err error) bool {
	r.stats.Failed.Add(1)
	lost := st.lost(r.cfg.DB)
	r.reset(st)
	switch {
	case lost != "":
		r.stats.StateLost.Add(1)
		c.Error(fmt.Sprintf("ERR lockproxy: %s; this client's %s there is lost with it: closing the connection, as Redis would", replyText(r.cfg.Addr, err), lost))
		c.Close()
	case !quiet:
		c.Error(replyText(r.cfg.Addr, err))
	}
	return false
}

// client is c's state, made on first use.
func (r *Router) client(c *resp.Conn) *client {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.clients[c.ID()]
	if st == nil {
		st = &client{db: r.cfg.DB}
		r.clients[c.ID()] = st
		r.watch(c)
	}
	return st
}

// watch forgets c's state and closes its upstream connection when c closes.
func (r *Router) watch(c *resp.Conn) {
	id := c.ID()
	go func() {
		<-c.Context().Done()
		r.drop(id)
	}()
}

// reset closes st's upstream connection, ending its transaction, database
// choice and subscriptions there.
func (r *Router) reset(st *client) {
	r.mu.Lock()
	up := st.up
	st.up = nil
	r.mu.Unlock()
	if up != nil {
		up.close()
	}
	st.multi, st.dirty, st.subAt = false, false, false
	st.watching, st.db, st.settings = false, r.cfg.DB, false
}

func (r *Router) drop(id uint64) {
	r.mu.Lock()
	st := r.clients[id]
	delete(r.clients, id)
	r.mu.Unlock()
	if st != nil && st.up != nil {
		st.up.close()
	}
}

// Info is INFO's passthrough section.
func (r *Router) Info(section string) string {
	if !resp.Wants(section, "passthrough") {
		return ""
	}
	r.mu.Lock()
	open := 0
	for _, st := range r.clients {
		if st.up != nil {
			open++
		}
	}
	r.mu.Unlock()
	return fmt.Sprintf("# Passthrough\r\ndata_redis:%s\r\nlock_keys:%s\r\nupstream_connections:%d\r\nforwarded_commands:%d\r\nforward_failures:%d\r\nclients_closed_state_lost:%d\r\n\r\n",
		r.cfg.Addr, strings.Join(r.cfg.LockKeys, ","), open, r.stats.Forwarded.Load(), r.stats.Failed.Load(), r.stats.StateLost.Load())
}
