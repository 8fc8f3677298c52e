package commands

import (
	"context"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/resp"
)

// TYPE, WAIT and WAITAOF answer what lock libraries send around their lock
// commands, as one Redis would for the keys lockproxy serves.
//
// WAIT and WAITAOF: lockproxy has no replicas of its own. A lock write is
// acknowledged to the client only once the backend's quorum (or ZooKeeper)
// has it, which WAIT cannot add to, so both answer as a Redis primary
// without replicas and without an append-only file does: WAIT replies 0,
// at once when numreplicas is 0 and otherwise after the timeout (0: until
// the connection closes), and WAITAOF refuses numlocal > 0 (lockproxy
// cannot promise that every node fsyncs) and otherwise replies [0, 0] the
// same way.

func (h *Handler) registerDurability(t *resp.Table) error {
	return t.Add(
		resp.Command{Name: "type", Arity: 2, Handler: h.typeOf, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "wait", Arity: 3, Handler: waitReplicas, Class: resp.Legacy},
		resp.Command{Name: "waitaof", Arity: 4, Handler: waitAOF, Class: resp.Legacy},
	)
}

// Errors of WAIT and WAITAOF, in Redis's words.
var (
	errWaitTimeout   error = argError("ERR timeout is not an integer or out of range")
	errWaitNoAOF     error = argError("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
	errNegativeCount error = argError("ERR value is out of range, must be positive")
)

// typeOf is TYPE key: "string" while a lock holds key (SET NX leaves a
// string on Redis), the nodes' own type for a value of another type held
// there (a client library's lock hash, written by a script), "none" when
// it is free.
func (h *Handler) typeOf(c *resp.Conn, args [][]byte) {
	key, err := h.limits.key(args[1])
	if err == nil && h.lostHere(c, key) {
		return
	}
	var hd engine.Holder
	held := false
	if err == nil {
		hd, held, err = h.engine.Info(c.Context(), key)
	}
	switch {
	case err != nil:
		h.fail(c, key, err)
	case held && hd.Type != "":
		c.Simple(hd.Type)
	case held:
		c.Simple("string")
	default:
		c.Simple("none")
	}
}

// waitReplicas is WAIT numreplicas timeout: 0, no replica acknowledged.
func waitReplicas(c *resp.Conn, args [][]byte) {
	n, timeout, err := waitArgs(args[1], args[2])
	if err != nil {
		c.Error(err.Error())
		return
	}
	if n > 0 {
		blockFor(c, timeout)
	}
	c.Int(0)
}

// waitAOF is WAITAOF numlocal numreplicas timeout: [0, 0] (no AOF, no
// replica), or Redis's error for numlocal > 0 without an AOF.
func waitAOF(c *resp.Conn, args [][]byte) {
	local, err := positive(args[1])
	var n int64
	var timeout time.Duration
	if err == nil {
		n, err = positive(args[2])
	}
	if err == nil {
		_, timeout, err = waitArgs(args[2], args[3])
	}
	if err == nil && local > 0 {
		err = errWaitNoAOF
	}
	if err != nil {
		c.Error(err.Error())
		return
	}
	if n > 0 {
		blockFor(c, timeout)
	}
	c.Array(2)
	c.Int(0)
	c.Int(0)
}

// positive reads a count that may not be negative, as Redis's
// getPositiveLongFromObjectOrReply does.
func positive(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	switch {
	case err != nil:
		return 0, errNotInteger
	case n < 0:
		return 0, errNegativeCount
	}
	return n, nil
}

// waitArgs reads WAIT's numreplicas and timeout in ms.
func waitArgs(count, ms []byte) (int64, time.Duration, error) {
	n, err := strconv.ParseInt(string(count), 10, 64)
	if err != nil {
		return 0, 0, errNotInteger
	}
	t, err := strconv.ParseInt(string(ms), 10, 64)
	switch {
	case err != nil || t > maxTTL:
		return 0, 0, errWaitTimeout
	case t < 0:
		return 0, 0, errTimeoutRange
	}
	return n, time.Duration(t) * time.Millisecond, nil
}

// blockFor blocks for d (0: no limit) or until the client closes the
// connection or sends QUIT, as a replica that never answers makes WAIT do.
func blockFor(c *resp.Conn, d time.Duration) {
	ctx := c.Context()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	gone, stop := c.WatchClose()
	defer stop()
	select {
	case <-gone:
	case <-ctx.Done():
	}
}
