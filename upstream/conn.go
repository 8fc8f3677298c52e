package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/quorum"
)

// A node's connection for its scripts. Whoever has a batch ready and finds
// the connection with room for it (fewer than Pipelines batches awaiting
// their replies) writes it straight to the socket, unless another
// goroutine is writing, which then writes it too before it stops: the
// caller of Do when the connection is idle, else the reader once the
// replies it waited for came. Nobody waits for a write but the writer, and
// a batch too large for the socket's buffers is written by a goroutine of
// its own (bigWrite), so that a fan-out never waits on one node before
// sending to the others. One reader goroutine per connection, parked in
// Go's netpoller, reads the replies in the order the batches went out and
// delivers each to its call. An idle call thus costs one write by its
// caller, one wake of the reader and one of the caller.
//
// The reader also sees at once when the node closes the connection (a
// restart, a kill, the node's idle timeout), so that the next batch dials
// a new one instead of failing on it. A connection that broke, or whose
// replies did not all come by the deadline of the batch they answer, is
// closed and never used again: every call it carried that got no reply
// fails, and the next batch dials. A batch whose deadline passed while one
// behind it still has time does not end it: its calls fail then, and its
// replies, read in their turn, are dropped (rearm).

// nodeConn is one connection to a node.
type nodeConn struct {
	nc    net.Conn
	rd    respReader
	runID string // the node process it reached (INFO server when dialled)

	wbuf []byte   // the writer's
	keys []string // the writer's, for opsScript's calls
	args []any    // the writer's, for opsScript's calls

	// Under RedisNode.mu:
	pending   []*batch  // in the order written, awaiting their replies
	unwritten []*batch  // the tail of pending not taken by a writer yet
	spare     []*batch  // unwritten's other buffer
	writing   bool      // a goroutine is writing; it writes unwritten too before it stops
	armed     time.Time // the read deadline set (arm)

	broken atomic.Pointer[error] // why a write closed the connection, if one did
}

// connect dials the node and introduces itself (AUTH when there is a
// password, SELECT when the database is not 0) and reads the run id of the
// process it reached (INFO server), all within deadline. A node that does
// not answer INFO (a renamed command) gets no run id, and the restart
// rule never counts its replies; a connection that fails the read is not
// used.
func (n *RedisNode) connect(deadline time.Time) (*nodeConn, error) {
	deadline = earlier(deadline, time.Now().Add(n.dialTimeout))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var nc net.Conn
	var err error
	if n.tls != nil {
		nc, err = (&tls.Dialer{Config: n.tls}).DialContext(ctx, "tcp", n.addr)
	} else {
		nc, err = (&net.Dialer{}).DialContext(ctx, "tcp", n.addr)
	}
	if err != nil {
		return nil, err
	}
	cn := &nodeConn{nc: nc, rd: newRespReader(nc)}
	if err := n.hello(cn, deadline); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return cn, nil
}

// hello is connect's introduction, in one round trip.
func (n *RedisNode) hello(cn *nodeConn, deadline time.Time) error {
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return err
	}
	var b []byte
	steps := 1
	if n.password != "" {
		b = appendCommand(b, "AUTH", n.password)
		steps++
	}
	if n.db != 0 {
		b = appendCommand(b, "SELECT", strconv.Itoa(n.db))
		steps++
	}
	b = appendCommand(b, "INFO", "server")
	if _, err := cn.nc.Write(b); err != nil {
		return err
	}
	for ; steps > 1; steps-- {
		if _, reply, err := cn.rd.reply(); err != nil || reply != nil {
			return errors.Join(err, reply)
		}
	}
	v, reply, err := cn.rd.reply()
	if err != nil {
		return err
	}
	if s, ok := v.(string); ok && reply == nil {
		cn.runID = infoField(s, "run_id")
	}
	id := cn.runID
	n.incarnation.Store(&id)
	return cn.nc.SetDeadline(time.Time{})
}

// bigWrite is the most bytes written by the goroutine that has a batch
// ready: a connection holds at most Pipelines batches the node has not
// answered, and a write this size fits in the socket's buffers (tens of
// KiB at least on Linux) even if the node reads nothing, so it does not
// wait for the node. A larger one (client scripts with large arguments)
// is written by a goroutine of its own.
const bigWrite = 32 << 10

// write writes cn's unwritten batches, and those pushed meanwhile, until
// none is left (the caller set cn.writing). Each write is bounded by the
// deadlines of its batches. A failed write leaves the connection unusable:
// it is closed, and its reader fails every batch awaiting replies on it.
func (n *RedisNode) write(cn *nodeConn, inline bool) {
	for {
		n.mu.Lock()
		bs := cn.unwritten
		if len(bs) == 0 {
			cn.writing = false
			n.mu.Unlock()
			return
		}
		cn.unwritten, cn.spare = cn.spare[:0], bs // bs is cleared before the next turn takes it back
		n.mu.Unlock()
		buf := cn.wbuf[:0]
		last := time.Time{}
		for _, b := range bs {
			for i := 0; i < len(b.calls); {
				k := inRow(b.calls, i)
				buf = n.appendCalls(cn, buf, b.source, b.calls[i:i+k])
				i += k
			}
			if b.timed {
				buf = appendCommand(buf, "TIME")
			}
			last = later(last, b.deadline)
		}
		cn.wbuf = buf
		if cap(buf) > 4*bigWrite {
			cn.wbuf = nil // not kept after a big batch
		}
		clear(bs)
		if inline && len(buf) > bigWrite {
			n.workers.Go(func() { n.send(cn, buf, last); n.write(cn, false) })
			return
		}
		n.send(cn, buf, last)
	}
}

// send writes buf on cn by deadline, and closes cn if it cannot.
func (n *RedisNode) send(cn *nodeConn, buf []byte, deadline time.Time) {
	if cn.broken.Load() != nil {
		return
	}
	err := cn.nc.SetWriteDeadline(deadline)
	if err == nil {
		_, err = cn.nc.Write(buf)
	}
	if err != nil {
		cn.broken.CompareAndSwap(nil, &err)
		_ = cn.nc.Close()
	}
}

// read reads the replies on cn until it breaks or is closed, then fails
// what awaited a reply on it and has the queue sent on a new connection.
func (n *RedisNode) read(cn *nodeConn) {
	err := n.readReplies(cn)
	_ = cn.nc.Close()
	if p := cn.broken.Load(); p != nil {
		err = *p
	}
	n.mu.Lock()
	lost := cn.pending
	cn.pending = nil
	if n.conn == cn {
		n.conn = nil
	}
	n.dispatch(nil) // dials again if calls are queued
	for _, b := range lost {
		if b.expired {
			continue // its calls failed when it expired (rearm)
		}
		for _, c := range b.calls {
			c.fail(err)
		}
	}
}

// readReplies reads each batch's replies, the batches in the order they
// were written, and answers their calls.
func (n *RedisNode) readReplies(cn *nodeConn) error {
	for {
		if _, err := cn.rd.rd.Peek(1); err != nil { // idle or not, parked here until the node sends
			if errors.Is(err, os.ErrDeadlineExceeded) && n.rearm(cn) {
				continue
			}
			return err
		}
		n.mu.Lock()
		var b *batch
		if len(cn.pending) > 0 {
			b = cn.pending[0]
		}
		n.mu.Unlock()
		if b == nil {
			return fmt.Errorf("%w: a reply that no call awaits", errProtocol)
		}
		for i := 0; i < len(b.calls); {
			k := inRow(b.calls, i)
			v, reply, err := cn.rd.reply()
			if err != nil {
				return err
			}
			spread(b.calls[i:i+k], v, reply)
			i += k
		}
		var now time.Time
		var unread error // a TIME not answered with the time: no vote of the batch counts
		if b.timed {
			v, reply, err := cn.rd.reply()
			if err != nil {
				return err
			}
			if reply == nil {
				now, reply = nodeTime(v)
			}
			if reply != nil {
				unread = fmt.Errorf("%w: %w", ErrNoClock, reply)
			}
		}
		var jumped error
		if !b.expired { // else no reading: its calls, failed already, could tell no jump (one shows at the next batch)
			jumped = n.clock.noteAt(now, b.sent, mono())
			if jumped == nil {
				jumped = unread
			}
		}
		n.answer(cn, b, jumped)
		n.clock.delivered(jumped)
	}
}

// rearm, once the read deadline passed with no reply begun, reports
// whether the connection is still of use. Every batch whose deadline
// passed expires: its calls fail now (unknown outcome, as a reply read
// after its deadline), and its replies, should they come, are read and
// dropped. The connection stays as long as a batch on it still has time:
// a batch with a short deadline (a health probe's) does not end it under
// one behind it with a later deadline (a renewal's heal, across a link
// slower than the probe's deadline). Once none has time, it ends (read),
// and is at once no longer the node's: a batch that comes meanwhile (a
// heal, sent on the answer just read) goes out on a new one.
// Else rearm sets the read deadline of the oldest batch still awaited, or
// none: the deadline that passed was one left set while the connection
// was idle (arm).
func (n *RedisNode) rearm(cn *nodeConn) bool {
	n.mu.Lock()
	now := time.Now()
	var passed []*batch
	live := false
	for _, b := range cn.pending {
		switch {
		case b.expired:
		case now.Before(b.deadline):
			live = true
		default:
			passed = append(passed, b)
		}
	}
	if len(cn.pending) > 0 && !live {
		// It ends: from now on calls queue for a new connection rather
		// than go out on this one and fail with it (read).
		if n.conn == cn {
			n.conn = nil
		}
		n.mu.Unlock()
		return false
	}
	for _, b := range passed {
		b.expired = true
	}
	d := cn.due()
	cn.armed = d
	_ = cn.nc.SetReadDeadline(d)
	n.mu.Unlock()
	for _, b := range passed {
		for _, c := range b.calls {
			c.fail(context.DeadlineExceeded)
		}
	}
	return true
}

// nodeTime reads TIME's reply, {seconds, microseconds}. A zero time is no
// reading.
func nodeTime(v any) (time.Time, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return time.Time{}, badReply("TIME", v)
	}
	s, ok1 := a[0].(string)
	us, ok2 := a[1].(string)
	sec, err1 := strconv.ParseInt(s, 10, 64)
	usec, err2 := strconv.ParseInt(us, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return time.Time{}, badReply("TIME", v)
	}
	return time.Unix(sec, usec*1000), nil
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// inRow is how many calls from calls[i] go out as one script call: the
// calls of lockproxy's own scripts in a row (opsScript), or calls[i]
// alone. The writer and the reader of a batch both count them so.
func inRow(calls []*call, i int) int {
	j := i + 1
	if own(calls[i].op) {
		for j < len(calls) && own(calls[j].op) {
			j++
		}
	}
	return j - i
}

// own reports whether op runs one of the scripts of opsScript.
func own(op *quorum.Op) bool {
	switch op.Kind {
	case quorum.OpAcquire, quorum.OpCommit, quorum.OpExtend, quorum.OpRelease, quorum.OpInspect,
		quorum.OpLeave, quorum.OpFloor, quorum.OpHeal:
		return true
	}
	return false
}

// appendCalls appends the script call that runs calls to b: one call's
// own EVALSHA, or one of opsScript for several (inRow), whose keys and
// arguments it gathers in cn's scratch (the writer's).
func (n *RedisNode) appendCalls(cn *nodeConn, b []byte, source bool, calls []*call) []byte {
	if len(calls) == 1 {
		s, keys, args := n.scriptFor(calls[0].op)
		return appendScript(b, s, source, keys, args)
	}
	head := make([]byte, 0, 3*len(calls))
	keys, args := cn.keys[:0], append(cn.args[:0], nil)
	for _, c := range calls {
		s, k, a := n.command(c.op)
		head = append(head, s.op, byte(len(k)), byte(len(a)))
		keys, args = append(keys, k...), append(args, a...)
	}
	args[0] = head
	b = appendScript(b, opsScript, source, keys, args)
	clear(keys)
	clear(args)
	cn.keys, cn.args = keys[:0], args[:0]
	if cap(keys) > maxScratch || cap(args) > maxScratch {
		cn.keys, cn.args = nil, nil // not kept after a big group, as wbuf
	}
	return b
}

// maxScratch bounds the entries of a connection's group scratch (keys,
// arguments) kept for the next group: 64 KiB of arguments, a group of
// about 370 acquires (max_batch goes to 100,000).
const maxScratch = 4096

// spread gives each of calls, sent as one script call (inRow), its part
// of the node's reply v (or error reply): opsScript's array holds one
// reply each, a nested error reply or null read as that call's own would
// be. An error reply to the whole call (NOSCRIPT, BUSY, ...) is each
// call's, as it would have been to each call sent alone.
func spread(calls []*call, v any, reply error) {
	if len(calls) == 1 || reply != nil {
		for _, c := range calls {
			c.val, c.reply = v, reply
		}
		return
	}
	a, ok := v.([]any)
	if !ok || len(a) != len(calls) {
		for _, c := range calls {
			c.val, c.reply = nil, badReply(opsScript.name, v)
		}
		return
	}
	for i, c := range calls {
		switch e := a[i].(type) {
		case nil:
			c.val, c.reply = nil, redis.Nil
		case replyError:
			c.val, c.reply = nil, e
		default:
			c.val, c.reply = e, nil
		}
	}
}
