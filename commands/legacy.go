package commands

import (
	"context"
	"errors"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/resp"
)

// The legacy commands answer as Redis does for a key that exists exactly
// while its lock is held, and whose value is the holder's token.

// errSetNeedsNX refuses a SET that is not a lock acquire.
var errSetNeedsNX error = argError("ERR lockproxy serves locks: SET must have NX (SET key token NX [PX ms]); see README, Legacy commands")

func (h *Handler) registerLegacy(t *resp.Table) error {
	return t.Add(
		resp.Command{Name: "set", Arity: -3, Handler: h.set, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "setnx", Arity: 3, Handler: h.setnx, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "get", Arity: 2, Handler: h.get, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "exists", Arity: -2, Handler: h.exists, Class: resp.Legacy, Keys: resp.AllKeys},
		resp.Command{Name: "ttl", Arity: 2, Handler: h.ttl, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "pttl", Arity: 2, Handler: h.ttl, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "expire", Arity: -3, Handler: h.expire, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "pexpire", Arity: -3, Handler: h.expire, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "del", Arity: -2, Handler: h.del, Class: resp.Legacy, Keys: resp.AllKeys},
		resp.Command{Name: "unlink", Arity: -2, Handler: h.del, Class: resp.Legacy, Keys: resp.AllKeys},
		resp.Command{Name: "delex", Arity: -2, Handler: h.delex, Class: resp.Legacy, Keys: resp.FirstKey},
		resp.Command{Name: "delifeq", Arity: 3, Handler: h.delifeq, Class: resp.Legacy, Keys: resp.FirstKey},
	)
}

// set is SET key token NX [PX ms | EX s | PXAT ms | EXAT s | KEEPTTL] [GET]:
// OK when the lock was taken, null when it is held (by any token, this one
// included). Without a TTL the lock is connection-bound. With GET the reply
// is the holder's token instead: null when the lock was taken.
func (h *Handler) set(c *resp.Conn, args [][]byte) {
	a, err := h.limits.parseSet(args, time.Now())
	if err == nil && a.flags&setNX == 0 {
		err = errSetNeedsNX
	}
	if err != nil {
		c.Error(err.Error())
		return
	}
	taken := false
	if !a.expired { // an expiry already past locks nothing, as in Redis
		taken, err = h.take(c, a.key, a.value, a.ttl)
	}
	if err == nil && a.flags&setGet != 0 {
		h.replyToken(c, a.key, taken)
		return
	}
	switch {
	case err != nil:
		c.Error(replyError(a.key, err))
	case taken || a.expired && !h.held(c, a.key):
		c.OK()
	default:
		c.Null()
	}
}

// replyToken answers SET ... GET: the token that held key, or null when
// taken (the key was free).
func (h *Handler) replyToken(c *resp.Conn, key string, taken bool) {
	if taken {
		c.Null()
		return
	}
	h.get(c, [][]byte{nil, []byte(key)})
}

// held reports whether key is held now; a failed look counts as held, so
// that SET ... PXAT in the past does not claim a lock that may exist.
func (h *Handler) held(c *resp.Conn, key string) bool {
	_, held, err := h.engine.Info(c.Context(), key)
	return held || err != nil
}

// take acquires key for token as SET NX does (fresh: refused even when
// token holds it); ttl 0 binds it to c. An empty token gets a random one.
func (h *Handler) take(c *resp.Conn, key, token string, ttl time.Duration) (bool, error) {
	g, err := h.engine.Lock(c.Context(), owner(c), key, engine.Hold{Token: token, TTL: ttl, Name: c.Name(), Fresh: true, Legacy: true})
	if errors.Is(err, engine.ErrNotAcquired) {
		return false, nil
	}
	if err == nil {
		session(c).took(key, grantID{g.Token, g.Fence})
	}
	return err == nil, err
}

// setnx is SETNX key token: 1 taken (connection-bound), 0 held.
func (h *Handler) setnx(c *resp.Conn, args [][]byte) {
	key, err := h.limits.key(args[1])
	var token string
	if err == nil {
		token, err = h.limits.value(args[2])
	}
	if err == nil {
		var taken bool
		if taken, err = h.take(c, key, token, 0); err == nil {
			c.Int(boolInt(taken))
			return
		}
	}
	h.fail(c, key, err)
}

// errWrongType is Redis's error for a command on a key of another type.
const errWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// get is GET key: the holder's token, or null when free. A key a majority
// of the nodes hold with a value of another type (a client library's lock
// hash, written by a script) gets Redis's WRONGTYPE: that is what GET
// would answer on each of those nodes.
func (h *Handler) get(c *resp.Conn, args [][]byte) {
	key, err := h.limits.key(args[1])
	if err != nil {
		c.Error(err.Error())
		return
	}
	if h.lostHere(c, key) {
		return
	}
	hd, held, err := h.engine.Info(c.Context(), key)
	switch {
	case err != nil:
		c.Error(replyError(key, err))
	case held && hd.Type != "":
		c.Error(errWrongType)
	case held:
		c.BulkString(hd.Token)
	default:
		c.Null()
	}
}

// exists is EXISTS key [key ...]: how many of the keys are held, a key
// named twice counting twice, as in Redis.
func (h *Handler) exists(c *resp.Conn, args [][]byte) {
	n := int64(0)
	for _, b := range args[1:] {
		key, err := h.limits.key(b)
		if err == nil && h.lostHere(c, key) {
			return
		}
		if err == nil {
			var held bool
			_, held, err = h.engine.Info(c.Context(), key)
			n += boolInt(held)
		}
		if err != nil {
			h.fail(c, key, err)
			return
		}
	}
	c.Int(n)
}

// ttl is TTL or PTTL key: the remaining validity in seconds (rounded) or
// ms, -1 for a connection-bound lock (it has no TTL the client gave), -2
// when free.
func (h *Handler) ttl(c *resp.Conn, args [][]byte) {
	key, err := h.limits.key(args[1])
	if err == nil && h.lostHere(c, key) {
		return
	}
	var ms int64
	if err == nil {
		ms, err = h.pttl(c.Context(), key)
	}
	switch {
	case err != nil:
		h.fail(c, key, err)
	case ms >= 0 && len(args[0]) == 3: // TTL, not PTTL
		c.Int((ms + 500) / 1000)
	default:
		c.Int(ms)
	}
}

// pttl is PTTL's answer for key.
func (h *Handler) pttl(ctx context.Context, key string) (int64, error) {
	hd, held, err := h.engine.Info(ctx, key)
	switch {
	case err != nil:
		return 0, err
	case !held:
		return -2, nil
	case hd.Mode == engine.Bound:
		return -1, nil
	}
	return hd.Validity.Milliseconds(), nil
}

// expire is EXPIRE key s or PEXPIRE key ms [NX | XX | GT | LT]: 1 when the
// lock's lease was set (a connection-bound lock becomes a lease; a TTL at
// or below zero releases it), 0 when the key is free, the option refuses,
// or the connection may not touch the lock (legacy.del_from_any_connection).
func (h *Handler) expire(c *resp.Conn, args [][]byte) {
	unit := time.Second
	if len(args[0]) == len("pexpire") {
		unit = time.Millisecond
	}
	a, err := h.limits.parseExpire(args, unit)
	if err != nil {
		c.Error(err.Error())
		return
	}
	if h.lostHere(c, a.key) {
		return
	}
	hd, held, err := h.engine.Info(c.Context(), a.key)
	if err != nil || !held || !h.mayTouch(c, a.key, hd) {
		h.intOrFail(c, a.key, false, err)
		return
	}
	current := hd.Validity.Milliseconds()
	if hd.Mode == engine.Bound {
		current = -1
	}
	if !a.flags.allows(current, a.ttl) {
		c.Int(0)
		return
	}
	var ok bool
	if a.ttl <= 0 { // releases it: taken from its holder, as by DEL
		ok, err = h.engine.Take(c.Context(), owner(c), a.key, hd.Token)
	} else {
		ok, err = h.setLease(c.Context(), a.key, hd.Token, a.ttl)
	}
	h.intOrFail(c, a.key, ok, err)
}

// setLease gives key held by token a lease of ms, or releases it when ms
// is not positive. False when token no longer holds key.
func (h *Handler) setLease(ctx context.Context, key, token string, ms int64) (bool, error) {
	if ms <= 0 {
		return h.engine.Unlock(ctx, key, token)
	}
	_, err := h.engine.Renew(ctx, key, token, time.Duration(ms)*time.Millisecond)
	if errors.Is(err, engine.ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
}

// del is DEL or UNLINK key [key ...]: how many locks it released. It
// releases whoever holds each key unless legacy.del_from_any_connection
// is off, when it releases only locks this connection took.
func (h *Handler) del(c *resp.Conn, args [][]byte) {
	n := int64(0)
	for _, b := range args[1:] {
		key, err := h.limits.key(b)
		if err == nil && h.lostHere(c, key) {
			return
		}
		var ok bool
		if err == nil {
			ok, err = h.delOne(c, key, func(string) bool { return true })
		}
		if err != nil {
			h.fail(c, key, err)
			return
		}
		n += boolInt(ok)
	}
	c.Int(n)
}

// delOne releases key if its holder's token passes match and the
// connection may touch it.
func (h *Handler) delOne(c *resp.Conn, key string, match func(token string) bool) (bool, error) {
	hd, held, err := h.engine.Info(c.Context(), key)
	if err != nil || !held || !match(hd.Token) || !h.mayTouch(c, key, hd) {
		return false, err
	}
	ok, err := h.engine.Take(c.Context(), owner(c), key, hd.Token)
	if ok {
		delete(session(c).taken, key)
	}
	return ok, err
}

// delex is DELEX key [IFEQ token | IFNE token] (Redis 8.4): 1 released, 0
// not. Without a condition it is DEL of one key. IFEQ is a compare-and-
// delete of the token, from any connection.
func (h *Handler) delex(c *resp.Conn, args [][]byte) {
	key, err := h.limits.key(args[1])
	if err != nil {
		c.Error(err.Error())
		return
	}
	if h.lostHere(c, key) {
		return
	}
	var ok bool
	switch cond := condition(args); cond {
	case "":
		ok, err = h.delOne(c, key, func(string) bool { return true })
	case "IFEQ":
		ok, err = h.engine.Unlock(c.Context(), key, string(args[3]))
	case "IFNE":
		ok, err = h.delOne(c, key, func(t string) bool { return t != string(args[3]) })
	case "IFDEQ", "IFDNE":
		c.Error(noDigests(cond).Error())
		return
	default:
		c.Error(errSyntax.Error())
		return
	}
	h.intOrFail(c, key, ok, err)
}

// condition is DELEX's condition, upper-cased: "" for none, "?" when the
// arguments do not fit.
func condition(args [][]byte) string {
	switch len(args) {
	case 2:
		return ""
	case 4:
		return upper(args[2])
	}
	return "?"
}

// delifeq is DELIFEQ key token (Valkey 9): 1 released, 0 not held by token.
func (h *Handler) delifeq(c *resp.Conn, args [][]byte) {
	key, token, err := h.keyToken(args)
	if err == nil && h.lostHere(c, key) {
		return
	}
	var ok bool
	if err == nil {
		ok, err = h.engine.Unlock(c.Context(), key, token)
	}
	h.intOrFail(c, key, ok, err)
}

// keyToken reads args[1] as a key and args[2] as a token.
func (h *Handler) keyToken(args [][]byte) (key, token string, err error) {
	if key, err = h.limits.key(args[1]); err == nil {
		token, err = h.limits.token(args[2])
	}
	return key, token, err
}

// intOrFail replies 1 or 0, or the error.
func (h *Handler) intOrFail(c *resp.Conn, key string, ok bool, err error) {
	if err != nil {
		h.fail(c, key, err)
		return
	}
	c.Int(boolInt(ok))
}

// fail replies err.
func (h *Handler) fail(c *resp.Conn, key string, err error) { c.Error(replyError(key, err)) }

// mayTouch reports whether c may release or re-lease key, held by hd,
// without showing the token: always, unless legacy.del_from_any_connection
// is off, when only the connection granted this very lock may — the same
// token and fence, so that a later grant to another connection with the
// same token (a constant value such as "1") is not taken for its own.
func (h *Handler) mayTouch(c *resp.Conn, key string, hd engine.Holder) bool {
	return h.legacy.DelFromAnyConnection || session(c).taken[key] == grantID{hd.Token, hd.Fence}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
