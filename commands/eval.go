package commands

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/resp"
)

// EVAL, EVALSHA and SCRIPT run the lock scripts that client libraries send,
// recognised by content (package luascript), as lock operations.

func (h *Handler) registerScripts(t *resp.Table) error {
	return t.Add(
		resp.Command{Name: "eval", Arity: -3, Handler: h.eval, Class: resp.Legacy, Keys: evalKeys},
		resp.Command{Name: "evalsha", Arity: -3, Handler: h.eval, Class: resp.Legacy, Keys: evalKeys},
		resp.Command{Name: "script", Arity: -2, Handler: h.script, Class: resp.Legacy},
	)
}

// eval is EVAL script numkeys [key ...] [arg ...], and EVALSHA sha1 ...:
// a known lock script runs as lock operations and replies as the script
// would on Redis; any other script that passes the admission check runs
// unchanged on every node (runOnNodes).
func (h *Handler) eval(c *resp.Conn, args [][]byte) {
	keys, argv, err := scriptArgs(args)
	if err != nil {
		c.Error(err.Error())
		return
	}
	var e luascript.Entry
	if len(args[0]) == len("eval") {
		_, e, err = h.scripts.Resolve(args[1]) // EVAL caches the script, as Redis does
	} else if e, _ = h.scripts.Lookup(string(args[1])); e == (luascript.Entry{}) {
		err = errNoScript
	}
	switch {
	case err == nil && e.Admitted != nil:
		err = h.runOnNodes(c, e.Admitted, keys, argv)
	case err == nil:
		err = h.runKnown(c, e.Known, keys, argv)
	}
	if err != nil {
		c.Error(replyError("", err))
	}
}

// runKnown runs a catalogued script as lock operations and replies as the
// script would on Redis.
func (h *Handler) runKnown(c *resp.Conn, s *luascript.Script, keys, argv [][]byte) error {
	r, err := s.Run(c.Context(), scriptLocks{h, c}, keys, argv)
	if err != nil {
		return err
	}
	writeReply(c, r)
	return nil
}

// scriptArgs splits EVAL's arguments after the script into KEYS and ARGV.
func scriptArgs(args [][]byte) (keys, argv [][]byte, err error) {
	n, ok := string2ll(args[2])
	switch {
	case !ok:
		return nil, nil, errNotInteger
	case n < 0:
		return nil, nil, errNegativeKeys
	case n > int64(len(args)-3):
		return nil, nil, errTooManyKeys
	}
	return args[3 : 3+n], args[3+n:], nil
}

// writeReply writes a script's reply.
func writeReply(c *resp.Conn, r luascript.Reply) {
	switch r.Kind {
	case luascript.Null:
		c.Null()
	case luascript.Int:
		c.Int(r.Int)
	case luascript.Bulk:
		c.BulkString(r.Str)
	case luascript.Status:
		c.Simple(r.Str)
	case luascript.Error:
		c.Error(oneLine(r.Str))
	case luascript.Array:
		c.Array(len(r.Array))
		for _, e := range r.Array {
			writeReply(c, e)
		}
	}
}

// script is SCRIPT LOAD script, SCRIPT EXISTS sha1 [sha1 ...] and SCRIPT
// FLUSH [ASYNC | SYNC]. LOAD takes only scripts lockproxy recognises.
func (h *Handler) script(c *resp.Conn, args [][]byte) {
	switch sub := upper(args[1]); {
	case sub == "LOAD" && len(args) == 3:
		sha, e, err := h.scripts.Resolve(args[2])
		if err == nil && e.Admitted != nil && h.run.Runner == nil {
			err = h.noRunner()
		}
		if err != nil {
			c.Error(replyError("", err))
			return
		}
		c.BulkString(sha)
	case sub == "LOAD":
		c.Error(errScriptLoadArgs.Error())
	case sub == "EXISTS" && len(args) > 2:
		c.Array(len(args) - 2)
		for _, sha := range args[2:] {
			c.Int(boolInt(h.scripts.Exists(string(sha))))
		}
	case sub == "EXISTS":
		c.Error(errScriptExistsArgs.Error())
	case sub == "FLUSH" && (len(args) == 2 || len(args) == 3 && (upper(args[2]) == "ASYNC" || upper(args[2]) == "SYNC")):
		h.scripts.Flush()
		c.OK()
	case sub == "FLUSH":
		c.Error(errFlushOption.Error())
	default:
		c.Error(unknownSubcommand("SCRIPT", args[1]).Error())
	}
}

// scriptLocks runs a script's lock operations for connection c.
type scriptLocks struct {
	h *Handler
	c *resp.Conn
}

var (
	_ luascript.Locks     = scriptLocks{}
	_ luascript.Publisher = scriptLocks{}
)

// Publish is a catalogued script's PUBLISH, through the clients' pub/sub.
// Its channel is checked as a key: not under lockproxy's prefix, and
// within the user's key patterns.
func (l scriptLocks) Publish(ctx context.Context, channel, message string) error {
	if err := l.h.run.reserved(channel, false); err != nil {
		return err
	}
	if !l.c.MayTouch(channel) {
		return argError("NOPERM No permissions to access a channel")
	}
	if l.h.run.Publish == nil {
		return nil
	}
	_, err := l.h.run.Publish(ctx, channel, []byte(message))
	return err
}

func (l scriptLocks) Get(ctx context.Context, key string) (string, int64, bool, error) {
	if _, err := l.h.limits.key([]byte(key)); err != nil {
		return "", 0, false, err
	}
	hd, held, err := l.h.engine.Info(ctx, key)
	if err != nil || !held {
		return "", -2, false, err
	}
	if hd.Mode == engine.Bound {
		return hd.Token, -1, true, nil
	}
	return hd.Token, hd.Validity.Milliseconds(), true, nil
}

func (l scriptLocks) SetNX(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if _, _, err := l.h.keyToken([][]byte{nil, []byte(key), []byte(token)}); err != nil {
		return false, err
	}
	return l.h.take(l.c, key, token, ttl)
}

func (l scriptLocks) PExpire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return l.h.setLease(ctx, key, token, ttl.Milliseconds())
}

func (l scriptLocks) Del(ctx context.Context, key, token string) (bool, error) {
	return l.h.engine.Unlock(ctx, key, token)
}

// evalKeys are EVAL's keys: numkeys of them after the script. A bad
// numkeys names no key; the handler rejects it.
func evalKeys(args [][]byte) [][]byte {
	n, ok := string2ll(args[2])
	if !ok || n < 0 || n > int64(len(args)-3) {
		return nil
	}
	return args[3 : 3+n]
}
