package commands

import "github.com/lockproxy/lockproxy/resp"

// WATCH over lock keys. resp/ queues MULTI and runs EXEC; what a watched
// lock key is, and whether it changed, is decided here.
//
// A lock key "changed" when its holder (token) or its fencing token is not
// what WATCH read: it was granted, released, expired, lost, or granted
// again, by any client through any instance. A RENEW or EXPIRE by the same
// holder is no change: it is the same grant. The check reads each key from
// the store just before the queue runs; a quorum cannot make the read and
// the queued commands one atomic step, so a change after the check is not
// seen (the queued lock commands are conditional themselves: SET NX,
// UNLOCK key token).

var _ resp.TxWatcher = (*Handler)(nil)

// maxWatched bounds the keys one connection watches.
const maxWatched = 1024

// watched is what WATCH read of a lock key.
type watched struct {
	held  bool
	token string
	fence int64
}

func watchKeys(args [][]byte) [][]byte { return args[1:] }

// registerMulti adds WATCH and UNWATCH, which every user may send, as
// MULTI (a user's key patterns still apply to the watched keys).
func (h *Handler) registerMulti(t *resp.Table) error {
	return t.Add(
		resp.Command{Name: "watch", Arity: -2, Handler: h.watch, Keys: watchKeys},
		resp.Command{Name: "unwatch", Arity: 1, Handler: h.unwatch},
	)
}

// watch is WATCH key [key ...]: it reads each key's holder and fence. A
// key that cannot be read is an error, and nothing of this WATCH is kept.
func (h *Handler) watch(c *resp.Conn, args [][]byte) {
	if c.InTransaction() {
		c.Error("ERR WATCH inside MULTI is not allowed")
		return
	}
	s := session(c)
	if len(s.watched)+len(args)-1 > maxWatched {
		c.Error("ERR lockproxy: a connection watches at most 1024 keys")
		return
	}
	read := make(map[string]watched, len(args)-1)
	for _, k := range args[1:] {
		key := string(k)
		if _, ok := s.watched[key]; ok {
			continue // Redis keeps the first WATCH of a key
		}
		w, err := h.readWatched(c, key)
		if err != nil {
			c.Error(replyError(key, err))
			return
		}
		read[key] = w
	}
	if s.watched == nil {
		s.watched = map[string]watched{}
	}
	for k, w := range read {
		s.watched[k] = w
	}
	c.OK()
}

// readWatched reads key's holder and fence.
func (h *Handler) readWatched(c *resp.Conn, key string) (watched, error) {
	hd, held, err := h.engine.Info(c.Context(), key)
	if err != nil || !held {
		return watched{}, err
	}
	return watched{held: true, token: hd.Token, fence: hd.Fence}, nil
}

// unwatch is UNWATCH.
func (h *Handler) unwatch(c *resp.Conn, _ [][]byte) {
	h.Unwatch(c)
	c.OK()
}

// Unwatch forgets c's watched keys.
func (h *Handler) Unwatch(c *resp.Conn) {
	if s, ok := c.State.(*connSession); ok {
		s.watched = nil
	}
}

// WatchedChanged reads c's watched keys again and reports whether any
// changed holder or fence. A key that cannot be read makes the check
// fail: EXEC replies the error and runs nothing.
func (h *Handler) WatchedChanged(c *resp.Conn) (bool, string) {
	s, ok := c.State.(*connSession)
	if !ok {
		return false, ""
	}
	for key, was := range s.watched {
		now, err := h.readWatched(c, key)
		if err != nil {
			return false, replyError(key, err)
		}
		if now != was {
			return true, ""
		}
	}
	return false, ""
}

// lockWaits reports whether LOCK ... WAIT blocks: not inside a
// transaction, where it tries once, as Redis runs BLPOP inside MULTI
// without blocking.
func lockWaits(c *resp.Conn, a lockArgs) bool { return a.waits && !c.InExec() }
