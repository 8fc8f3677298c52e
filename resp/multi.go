package resp

import "strings"

// Transactions, as Redis 7 serves them: MULTI starts queueing, each
// command is checked (known, arity, authentication, permissions) and
// answered +QUEUED or with the error that makes EXEC answer -EXECABORT;
// EXEC runs the queue in order and replies the array of their replies;
// DISCARD drops it. Nothing queued runs before EXEC. WATCH lives in the
// Session (TxWatcher), which EXEC asks before the queue runs.

// Redis 7's replies.
const (
	msgNestedMulti  = "ERR MULTI calls can not be nested"
	msgExecNoMulti  = "ERR EXEC without MULTI"
	msgDiscNoMulti  = "ERR DISCARD without MULTI"
	msgExecAbort    = "EXECABORT Transaction discarded because of previous errors."
	msgExecAbortFor = "EXECABORT Transaction discarded because of: "
	msgTxTooBig     = "ERR lockproxy: the transaction's queued commands exceed max_request_bytes; it is discarded at EXEC"
	msgNoBudget     = "ERR lockproxy: max buffered bytes of all clients reached; the transaction is discarded at EXEC"
)

// TxWatcher serves WATCH (Config.Watcher). EXEC asks it,
// before the queue runs, whether a key the connection watches changed:
// changed true makes EXEC reply a null array; a non-empty errReply (the
// check could not be made) is EXEC's reply instead, and nothing runs.
// Unwatch forgets the connection's watches, after every EXEC and DISCARD.
type TxWatcher interface {
	WatchedChanged(c *Conn) (changed bool, errReply string)
	Unwatch(c *Conn)
}

// tx is a transaction being queued.
type tx struct {
	cmds  []queuedCmd
	bytes int  // held from the server's budget, given back when it ends
	dirty bool // a command was refused: EXEC aborts
}

type queuedCmd struct {
	def  *Command
	args [][]byte // copies: the read buffer is reused by the next batch
}

// txControl are the commands that run at once inside MULTI, as in Redis.
var txControl = map[string]bool{"multi": true, "exec": true, "discard": true, "watch": true, "quit": true, "reset": true}

// subscribing are resp's own commands that cannot join a transaction:
// they put the connection in subscribed mode, which EXEC's array cannot
// carry (as NoMulti).
var subscribing = map[string]bool{"subscribe": true, "psubscribe": true, "ssubscribe": true,
	"unsubscribe": true, "punsubscribe": true, "sunsubscribe": true}

// isClientReply reports whether args are CLIENT REPLY, which cannot join
// a transaction: OFF and SKIP would leave EXEC's array short of a reply.
func isClientReply(def *Command, args [][]byte) bool {
	return def.Name == "client" && len(args) > 1 && strings.EqualFold(string(args[1]), "reply")
}

// InTransaction reports whether c queues commands (after MULTI, before
// EXEC or DISCARD).
func (c *Conn) InTransaction() bool { return c.tx != nil }

// InExec reports whether the command being served runs from EXEC's
// queue: a command that would block runs without blocking, as Redis runs
// them inside a transaction.
func (c *Conn) InExec() bool { return c.inExec }

// txRefused marks the transaction (if any) to abort at EXEC, as Redis
// flags one whose command it rejected.
func (c *Conn) txRefused() {
	if c.tx != nil {
		c.tx.dirty = true
	}
}

// reject answers a command refused before it ran; inside MULTI the
// transaction aborts at EXEC, and a refused EXEC aborts it at once.
func (s *Server) reject(c *Conn, def *Command, msg string) {
	if c.tx == nil {
		c.Error(msg)
		return
	}
	c.txRefused()
	if def != nil && def.Name == "exec" {
		s.endTx(c)
		c.Error(msgExecAbortFor + strings.TrimPrefix(msg, "ERR "))
		return
	}
	c.Error(msg)
}

// queues reports whether def, sent now, is queued rather than run.
func (c *Conn) queues(def *Command) bool { return c.tx != nil && !txControl[def.Name] }

// enqueue queues a checked command and answers +QUEUED.
func (s *Server) enqueue(c *Conn, def *Command, args [][]byte) {
	if def.Flags&NoMulti != 0 || subscribing[def.Name] || isClientReply(def, args) {
		s.reject(c, def, "ERR lockproxy: '"+def.Name+"' cannot join a transaction")
		return
	}
	n := queuedSize(args)
	switch {
	case c.tx.bytes+n > s.Limits().MaxRequest:
		s.reject(c, def, msgTxTooBig)
		return
	case !s.budget.take(n):
		s.reject(c, def, msgNoBudget)
		return
	}
	c.tx.bytes += n
	cp := make([][]byte, len(args))
	for i, a := range args {
		cp[i] = append([]byte(nil), a...)
	}
	c.tx.cmds = append(c.tx.cmds, queuedCmd{def: def, args: cp})
	c.Simple("QUEUED")
}

// queuedSize is what a queued command holds, in bytes.
func queuedSize(args [][]byte) int {
	n := 64
	for _, a := range args {
		n += len(a) + 24
	}
	return n
}

// endTx ends c's transaction, if any, giving back what it held, and
// forgets c's watches.
func (s *Server) endTx(c *Conn) {
	if c.tx != nil {
		s.budget.give(c.tx.bytes)
		c.tx = nil
	}
	if s.cfg.Watcher != nil {
		s.cfg.Watcher.Unwatch(c)
	}
}

func (s *Server) txCommands() []Command {
	return []Command{
		{Name: "multi", Arity: 1, Handler: s.multi},
		{Name: "exec", Arity: 1, Handler: s.exec},
		{Name: "discard", Arity: 1, Handler: s.discard},
	}
}

// multi is MULTI.
func (s *Server) multi(c *Conn, _ [][]byte) {
	if c.tx != nil {
		c.Error(msgNestedMulti)
		return
	}
	c.tx = &tx{}
	c.OK()
}

// discard is DISCARD.
func (s *Server) discard(c *Conn, _ [][]byte) {
	if c.tx == nil {
		c.Error(msgDiscNoMulti)
		return
	}
	s.endTx(c)
	c.OK()
}

// exec is EXEC: -EXECABORT after a refused command, a null array when a
// watched key changed, else the queue's replies in order.
func (s *Server) exec(c *Conn, _ [][]byte) {
	t := c.tx
	if t == nil {
		c.Error(msgExecNoMulti)
		return
	}
	defer s.endTx(c)
	if t.dirty {
		c.Error(msgExecAbort)
		return
	}
	if s.cfg.Watcher != nil {
		changed, errReply := s.cfg.Watcher.WatchedChanged(c)
		switch {
		case errReply != "":
			c.Error(errReply)
			return
		case changed:
			c.NullArray()
			return
		}
	}
	c.tx = nil // the queued commands run outside MULTI
	s.runQueue(c, t.cmds)
	s.budget.give(t.bytes)
}

// runQueue runs the queued commands, each one's reply an element of
// EXEC's array. Permissions are checked again, as Redis 7 does at EXEC.
func (s *Server) runQueue(c *Conn, cmds []queuedCmd) {
	c.Array(len(cmds))
	c.inExec = true
	defer func() { c.inExec = false }()
	for _, q := range cmds {
		if c.closing.Load() {
			c.Error("ERR lockproxy: the connection is closing")
			continue
		}
		c.mu.Lock()
		c.lastCmd = q.def.Name
		c.mu.Unlock()
		if e := s.noPerm(c, q.def, q.args); e != "" {
			c.Error(e)
			continue
		}
		inDB(c.DB(), q.def, q.args)
		q.def.Handler(c, q.args)
	}
}
