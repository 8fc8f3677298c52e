package luascript

import (
	"context"
	"errors"
	"math"
	"time"
)

// Locks is what a recognised script may do to locks. Implemented by the
// caller over the lock engine.
type Locks interface {
	// Get returns the token (the value) holding key and its remaining TTL in ms,
	// -1 when the lock has no TTL (connection-bound); held is false when the key is free.
	Get(ctx context.Context, key string) (token string, pttl int64, held bool, err error)
	// SetNX takes key for token with ttl (0: no TTL, bound to the client's connection);
	// false when key is held by anyone, token included (Redis SET NX semantics).
	SetNX(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// PExpire sets the TTL of key held by token to ttl; false when token does not hold key.
	PExpire(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// Del releases key held by token; false when token does not hold it.
	Del(ctx context.Context, key, token string) (bool, error)
}

// Publisher is implemented by a Locks that can deliver Redis pub/sub
// messages. Spring's PUB_SUB_LOCK unlock scripts PUBLISH the released key to
// wake its waiters; when Locks is not a Publisher that message is dropped and
// the waiters fall back to their timeout.
type Publisher interface {
	Publish(ctx context.Context, channel, message string) error
}

// Kind is the RESP type of a Reply.
type Kind uint8

// The reply kinds a Lua value converts to (RESP2 conversion; Redis keeps it
// for RESP3 clients too unless the script calls redis.setresp(3), which no
// known script does).
const (
	Null   Kind = iota // Lua false or nil: a null bulk string
	Int                // a Lua number (truncated) or true (1)
	Bulk               // a Lua string
	Status             // redis.status_reply
	Array              // a Lua table
	Error              // an error reply, Str its text: a script run on the nodes failed, or returned a pcall error in a table
)

// Reply is the reply Redis would give to EVAL of the script.
type Reply struct {
	Kind  Kind
	Int   int64
	Str   string
	Array []Reply
}

var (
	replyNull = Reply{Kind: Null}
	replyOK   = Reply{Kind: Status, Str: "OK"}
	reply0    = intReply(0)
	reply1    = intReply(1)
)

func intReply(n int64) Reply { return Reply{Kind: Int, Int: n} }

// orErr is r, or the zero Reply when err is set.
func orErr(r Reply, err error) (Reply, error) {
	if err != nil {
		return Reply{}, err
	}
	return r, nil
}

func boolReply(ok bool, yes, no Reply) Reply {
	if ok {
		return yes
	}
	return no
}

// rollbackTimeout bounds the release of keys taken by a multi-key acquire
// that failed part-way.
const rollbackTimeout = 5 * time.Second

// call is one run of a script: the lock operations and EVAL's KEYS and ARGV.
type call struct {
	l    Locks
	keys []string
	args []string
}

// key is KEYS[i] (1-based); Redis fails a redis.call given KEYS[i] == nil.
func (c *call) key(i int) (string, error) {
	if i > len(c.keys) {
		return "", errLuaArg
	}
	return c.keys[i-1], nil
}

// arg is ARGV[i] (1-based); ok is false where Lua would see nil.
func (c *call) arg(i int) (s string, ok bool) {
	if i > len(c.args) {
		return "", false
	}
	return c.args[i-1], true
}

// lockState is what GET and PTTL say of a key.
type lockState struct {
	token string
	pttl  int64
	held  bool
}

// heldBy is Lua's `redis.call("get", key) == tok` (nil never equals).
func (s lockState) heldBy(tok string, ok bool) bool { return s.held && ok && s.token == tok }

// value is the key's string value, "" when it is missing (as GETRANGE sees it).
func (s lockState) value() string {
	if !s.held {
		return ""
	}
	return s.token
}

func (c *call) get(ctx context.Context, key string) (lockState, error) {
	tok, pttl, held, err := c.l.Get(ctx, key)
	return lockState{token: tok, pttl: pttl, held: held}, err
}

// getAll is MGET: the state of every key, in order.
func (c *call) getAll(ctx context.Context) ([]lockState, error) {
	sts := make([]lockState, len(c.keys))
	for i, k := range c.keys {
		st, err := c.get(ctx, k)
		if err != nil {
			return nil, err
		}
		sts[i] = st
	}
	return sts, nil
}

// allHeldBy is the loop `if values[i] ~= ARGV[1] then return false end`.
func allHeldBy(sts []lockState, tok string, ok bool) bool {
	for _, st := range sts {
		if !st.heldBy(tok, ok) {
			return false
		}
	}
	return true
}

// expireArg parses a TTL argument as PEXPIRE ("pexpire") or SET PX ("set")
// does: an integer in ms; for pexpire a TTL <= 0 is valid (it deletes the key).
func expireArg(s string, present bool, cmd string) (int64, error) {
	if !present {
		return 0, errLuaArg
	}
	ms, ok := string2ll(s)
	overflow := ms > math.MaxInt64-time.Now().UnixMilli() // Redis adds the time
	switch {
	case !ok:
		return 0, errNotInt
	case cmd == "set" && (ms <= 0 || overflow):
		return 0, errSetTime
	case overflow:
		return 0, errPExpTime
	}
	return ms, nil
}

// maxDuration caps the TTLs a catalogued script gives a lock: 100 years,
// as SET and EXPIRE are capped (commands), so that the backends'
// arithmetic on it (whole milliseconds rounded up, deadlines) stays
// within int64. The lock outlives every client either way.
const maxDuration = 36525 * 24 * time.Hour

// duration converts ms to a Duration, capped at maxDuration.
func duration(ms int64) time.Duration {
	if ms > int64(maxDuration/time.Millisecond) {
		return maxDuration
	}
	return time.Duration(ms) * time.Millisecond
}

// delIfHeld is `if GET(key) == tok then DEL(key)`; it reports whether it deleted.
func (c *call) delIfHeld(ctx context.Context, key, tok string, ok bool) (bool, error) {
	if !ok {
		return false, nil
	}
	return c.l.Del(ctx, key, tok)
}

// pexpire is PEXPIRE of a key tok holds: a TTL <= 0 deletes the key.
func (c *call) pexpire(ctx context.Context, key, tok string, ms int64) (bool, error) {
	if ms <= 0 {
		return c.l.Del(ctx, key, tok)
	}
	return c.l.PExpire(ctx, key, tok, duration(ms))
}

// expireIfHeld is `if GET(key) == ARGV[1] then PEXPIRE(key, ARGV[2])`; it
// reports whether ARGV[1] held key. A bad TTL is an error only when it did.
func (c *call) expireIfHeld(ctx context.Context, key string) (bool, error) {
	tok, tokOK := c.arg(1)
	if !tokOK {
		return false, nil
	}
	ttl, ttlOK := c.arg(2)
	ms, err := expireArg(ttl, ttlOK, "pexpire")
	if err == nil {
		return c.pexpire(ctx, key, tok, ms)
	}
	st, gerr := c.get(ctx, key)
	if gerr != nil || !st.heldBy(tok, true) {
		return false, gerr
	}
	return true, err
}

// takeAll takes every key for tok with SetNX, in order; when one is held it
// releases the ones it took and reports false.
func (c *call) takeAll(ctx context.Context, keys []string, tok string, ms int64) (bool, error) {
	var taken []string
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			continue // Redis sets a repeated key twice, to the same value
		}
		ok, err := c.l.SetNX(ctx, k, tok, duration(ms))
		if err != nil || !ok {
			return false, errors.Join(err, c.rollback(ctx, taken, tok))
		}
		taken, seen[k] = append(taken, k), true
	}
	return true, nil
}

// rollback releases keys taken for tok, even when the call's context is done.
func (c *call) rollback(ctx context.Context, keys []string, tok string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	var errs []error
	for _, k := range keys {
		if _, err := c.l.Del(ctx, k, tok); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// replace is `SET key tok PX ms` over whatever holds key (st): it takes a
// free key, extends tok's own, and swaps another value for tok's. A TTL <= 0
// (PEXPIRE after MSET) leaves the key free.
func (c *call) replace(ctx context.Context, key string, st lockState, tok string, ms int64) (bool, error) {
	switch {
	case ms <= 0 && st.held:
		_, err := c.l.Del(ctx, key, st.token)
		return true, err
	case ms <= 0:
		return true, nil
	case st.held && st.token == tok:
		return c.l.PExpire(ctx, key, tok, duration(ms))
	case st.held:
		if ok, err := c.l.Del(ctx, key, st.token); err != nil || !ok {
			return false, err
		}
	}
	return c.l.SetNX(ctx, key, tok, duration(ms))
}
