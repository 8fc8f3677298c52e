package luascript

import "context"

// The operations of the known scripts. Each follows its Lua line by line:
// the same checks in the same order, so it fails where Redis fails and
// replies what Redis replies. Where the Lua reads then writes, the write is a
// token-checked Locks call, so a lock taken by someone else in between is
// never touched; well-formed arguments take a single atomic call when the
// script allows it.

type runFunc func(ctx context.Context, c *call) (Reply, error)

// compareDel: `if GET(KEYS[1]) == ARGV[1] then DEL(KEYS[1]); yes else no`.
func compareDel(yes, no Reply) runFunc {
	return func(ctx context.Context, c *call) (Reply, error) {
		key, err := c.key(1)
		if err != nil {
			return Reply{}, err
		}
		tok, ok := c.arg(1)
		deleted, err := c.delIfHeld(ctx, key, tok, ok)
		return orErr(boolReply(deleted, yes, no), err)
	}
}

// compareExpire: `if GET(KEYS[1]) == ARGV[1] then PEXPIRE(KEYS[1], ARGV[2]); yes else no`.
func compareExpire(yes, no Reply) runFunc {
	return func(ctx context.Context, c *call) (Reply, error) {
		key, err := c.key(1)
		if err != nil {
			return Reply{}, err
		}
		held, err := c.expireIfHeld(ctx, key)
		if err != nil {
			return Reply{}, err
		}
		return boolReply(held, yes, no), nil
	}
}

// setNXPX: `return SET(KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`.
func setNXPX(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	tok, ok := c.arg(1)
	if !ok {
		return Reply{}, errLuaArg
	}
	ttl, ttlOK := c.arg(2)
	ms, err := expireArg(ttl, ttlOK, "set")
	if err != nil {
		return Reply{}, err
	}
	taken, err := c.l.SetNX(ctx, key, tok, duration(ms))
	return orErr(boolReply(taken, replyOK, replyNull), err)
}

// redsyncDelete: DEL when ARGV[1] holds KEYS[1]: 1; -1 when it is free; else 0.
func redsyncDelete(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	tok, ok := c.arg(1)
	if deleted, err := c.delIfHeld(ctx, key, tok, ok); err != nil || deleted {
		return orErr(reply1, err)
	}
	st, err := c.get(ctx, key)
	return orErr(boolReply(st.held, reply0, intReply(-1)), err)
}

// redsyncTouchWithSetNX: PEXPIRE when ARGV[1] holds KEYS[1], else SET NX PX: 1 or 0.
func redsyncTouchWithSetNX(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	if ok, done, err := c.extendOrTake(ctx, key); done {
		return orErr(boolReply(ok, reply1, reply0), err)
	}
	tok, tokOK := c.arg(1)
	st, err := c.get(ctx, key)
	if err != nil {
		return Reply{}, err
	}
	if st.heldBy(tok, tokOK) {
		ok, err := c.expireOwn(ctx, key, tok)
		return orErr(boolReply(ok, reply1, reply0), err)
	}
	return Reply{}, c.setArgsErr(tokOK) // SET parses its arguments even on a held key
}

// springObtain: PEXPIRE when ARGV[1] holds KEYS[1], else SET PX when free:
// true (1), else false (null).
func springObtain(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	if ok, done, err := c.extendOrTake(ctx, key); done {
		return orErr(boolReply(ok, reply1, replyNull), err)
	}
	tok, tokOK := c.arg(1)
	st, err := c.get(ctx, key)
	switch {
	case err != nil:
		return Reply{}, err
	case st.heldBy(tok, tokOK):
		_, err := c.expireOwn(ctx, key, tok) // its reply is ignored: true
		return orErr(reply1, err)
	case st.held:
		return replyNull, nil
	}
	return Reply{}, c.setArgsErr(tokOK)
}

// extendOrTake is, for well-formed ARGV[1] and ARGV[2], PEXPIRE of KEYS[1]
// when ARGV[1] holds it, else SET NX PX: ok when either happened. done is
// false when the arguments are not well formed; the caller then answers as
// the script would on Redis with them.
func (c *call) extendOrTake(ctx context.Context, key string) (ok, done bool, err error) {
	tok, tokOK := c.arg(1)
	ttl, ttlOK := c.arg(2)
	ms, err := expireArg(ttl, ttlOK, "set")
	if err != nil || !tokOK {
		return false, false, nil
	}
	if ok, err := c.l.PExpire(ctx, key, tok, duration(ms)); err != nil || ok {
		return ok, true, err
	}
	ok, err = c.l.SetNX(ctx, key, tok, duration(ms))
	return ok, true, err
}

// expireOwn is `PEXPIRE(KEYS[1], ARGV[2])` on a key tok holds.
func (c *call) expireOwn(ctx context.Context, key, tok string) (bool, error) {
	ttl, ok := c.arg(2)
	ms, err := expireArg(ttl, ok, "pexpire")
	if err != nil {
		return false, err
	}
	return c.pexpire(ctx, key, tok, ms)
}

// setArgsErr is the error of `SET KEYS[1] ARGV[1] PX ARGV[2]` with bad arguments.
func (c *call) setArgsErr(tokOK bool) error {
	if !tokOK {
		return errLuaArg
	}
	ttl, ok := c.arg(2)
	_, err := expireArg(ttl, ok, "set")
	return err
}

// springPubSubUnlock: DEL when ARGV[1] holds KEYS[1], then PUBLISH KEYS[1]
// to channel ARGV[2]: true (1), else false (null).
func springPubSubUnlock(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	tok, ok := c.arg(1)
	if deleted, err := c.delIfHeld(ctx, key, tok, ok); err != nil || !deleted {
		return orErr(replyNull, err)
	}
	channel, ok := c.arg(2)
	if !ok {
		return Reply{}, errLuaArg // after the DEL, as in Redis
	}
	if p, ok := c.l.(Publisher); ok {
		if err := p.Publish(ctx, channel, key); err != nil {
			return Reply{}, err
		}
	}
	return reply1, nil
}

// redislockPTTL: PTTL when ARGV[1] holds KEYS[1], else -3.
func redislockPTTL(ctx context.Context, c *call) (Reply, error) {
	st, held, err := c.heldFirst(ctx)
	if err != nil {
		return Reply{}, err
	}
	return boolReply(held, intReply(st.pttl), intReply(-3)), nil
}

// potteryAcquired: the PTTL of KEYS[1] when ARGV[1] holds it and it has
// a TTL, else 0.
func potteryAcquired(ctx context.Context, c *call) (Reply, error) {
	st, held, err := c.heldFirst(ctx)
	if err != nil {
		return Reply{}, err
	}
	return boolReply(held && st.pttl > 0, intReply(st.pttl), intReply(0)), nil
}

// heldFirst reads KEYS[1] and whether ARGV[1] holds it.
func (c *call) heldFirst(ctx context.Context) (lockState, bool, error) {
	key, err := c.key(1)
	if err != nil {
		return lockState{}, false, err
	}
	st, err := c.get(ctx, key)
	if err != nil {
		return lockState{}, false, err
	}
	tok, ok := c.arg(1)
	return st, st.heldBy(tok, ok), nil
}

// redisPyExtend: when ARGV[1] holds KEYS[1] with a TTL, PEXPIRE it to
// ARGV[2], plus the remaining TTL when ARGV[3] == "0": 1, else 0.
func redisPyExtend(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	st, err := c.get(ctx, key)
	if err != nil {
		return Reply{}, err
	}
	tok, ok := c.arg(1)
	if !st.heldBy(tok, ok) || st.pttl < 0 {
		return reply0, nil
	}
	ms, err := c.redisPyNewTTL(st.pttl)
	if err != nil {
		return Reply{}, err
	}
	extended, err := c.pexpire(ctx, key, tok, ms)
	return orErr(boolReply(extended, reply1, reply0), err)
}

// redisPyNewTTL is `newttl = ARGV[2]`, or `ARGV[2] + expiration` (Lua
// arithmetic) when ARGV[3] == "0", as PEXPIRE parses it.
func (c *call) redisPyNewTTL(pttl int64) (int64, error) {
	ttl, ok := c.arg(2)
	if mode, _ := c.arg(3); mode != "0" {
		return expireArg(ttl, ok, "pexpire")
	}
	if !ok {
		return 0, errArithNil
	}
	v, ok := luaStrToNumber(ttl)
	if !ok {
		return 0, errArithStr
	}
	return expireArg(redisArg(v+float64(pttl)), true, "pexpire")
}

// redlockRbLock: SET PX when KEYS[1] is free and ARGV[3] == "yes", or when
// ARGV[1] holds it: OK, else null.
func redlockRbLock(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	tok, tokOK := c.arg(1)
	ttl, ttlOK := c.arg(2)
	mode, _ := c.arg(3)
	mayTake := mode == "yes"
	ms, err := expireArg(ttl, ttlOK, "set")
	if err != nil || !tokOK {
		return c.redlockRbLockSlow(ctx, key, tok, tokOK, mayTake, err)
	}
	if mayTake {
		if ok, err := c.l.SetNX(ctx, key, tok, duration(ms)); err != nil || ok {
			return orErr(replyOK, err)
		}
	}
	ok, err := c.l.PExpire(ctx, key, tok, duration(ms))
	return orErr(boolReply(ok, replyOK, replyNull), err)
}

// redlockRbLockSlow decides whether redlockRbLock reaches its SET, which
// then fails on its bad arguments (setErr, or the missing ARGV[1]).
func (c *call) redlockRbLockSlow(ctx context.Context, key, tok string, tokOK, mayTake bool, setErr error) (Reply, error) {
	st, err := c.get(ctx, key)
	if err != nil {
		return Reply{}, err
	}
	if !(!st.held && mayTake) && !st.heldBy(tok, tokOK) {
		return replyNull, nil
	}
	if !tokOK {
		return Reply{}, errLuaArg
	}
	return Reply{}, setErr
}

// redlockRbPTTL: { GET(KEYS[1]), PTTL(KEYS[1]) }.
func redlockRbPTTL(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	st, err := c.get(ctx, key)
	if err != nil {
		return Reply{}, err
	}
	if !st.held {
		return Reply{Kind: Array, Array: []Reply{replyNull, intReply(-2)}}, nil
	}
	return Reply{Kind: Array, Array: []Reply{{Kind: Bulk, Str: st.token}, intReply(st.pttl)}}, nil
}
