package luascript

import (
	"context"
	"errors"
)

// The operations of the multi-key scripts (node-redlock v4/v5, bsm/redislock
// v0.10) and of bsm/redislock's re-entrant obtain.

// redlockAcquire: 0 if any key exists, else SET every key PX ARGV[2]: #KEYS.
func redlockAcquire(ctx context.Context, c *call) (Reply, error) {
	tok, tokOK := c.arg(1)
	ttl, ttlOK := c.arg(2)
	if ms, err := expireArg(ttl, ttlOK, "set"); err == nil && tokOK {
		ok, err := c.takeAll(ctx, c.keys, tok, ms)
		return orErr(boolReply(ok, intReply(int64(len(c.keys))), reply0), err)
	}
	sts, err := c.getAll(ctx)
	if err != nil {
		return Reply{}, err
	}
	for _, st := range sts {
		if st.held {
			return reply0, nil
		}
	}
	if len(c.keys) == 0 {
		return reply0, nil // no SET runs
	}
	return Reply{}, c.setArgsErr(tokOK)
}

// redlockExtend: 0 unless ARGV[1] holds every key, else SET every key PX
// ARGV[2] (same value): #KEYS.
func redlockExtend(ctx context.Context, c *call) (Reply, error) {
	sts, err := c.getAll(ctx)
	if err != nil {
		return Reply{}, err
	}
	tok, tokOK := c.arg(1)
	if !allHeldBy(sts, tok, tokOK) || len(c.keys) == 0 {
		return reply0, nil
	}
	ttl, ttlOK := c.arg(2)
	ms, err := expireArg(ttl, ttlOK, "set")
	if err != nil {
		return Reply{}, err
	}
	for _, k := range c.keys {
		if ok, err := c.l.PExpire(ctx, k, tok, duration(ms)); err != nil || !ok {
			return orErr(reply0, err) // lost meanwhile
		}
	}
	return intReply(int64(len(c.keys))), nil
}

// redlockRelease: DEL every key ARGV[1] holds: how many.
func redlockRelease(ctx context.Context, c *call) (Reply, error) {
	tok, ok := c.arg(1)
	n := int64(0)
	for _, k := range c.keys {
		deleted, err := c.delIfHeld(ctx, k, tok, ok)
		if err != nil {
			return Reply{}, err
		}
		if deleted {
			n++
		}
	}
	return intReply(n), nil
}

// allHeldCheck is bsm/redislock v0.10's prologue: MGET KEYS (an error with
// no keys), false unless ARGV[1] holds every key.
func (c *call) allHeldCheck(ctx context.Context) (sts []lockState, held bool, err error) {
	if len(c.keys) == 0 {
		return nil, false, errArity
	}
	if sts, err = c.getAll(ctx); err != nil {
		return nil, false, err
	}
	tok, ok := c.arg(1)
	return sts, allHeldBy(sts, tok, ok), nil
}

// redislockRelease: when ARGV[1] holds every key, DEL them all: OK, else false.
func redislockRelease(ctx context.Context, c *call) (Reply, error) {
	_, held, err := c.allHeldCheck(ctx)
	if err != nil || !held {
		return orErr(replyNull, err)
	}
	tok, _ := c.arg(1)
	for _, k := range c.keys {
		if _, err := c.l.Del(ctx, k, tok); err != nil {
			return Reply{}, err
		}
	}
	return replyOK, nil
}

// redislockRefresh: when ARGV[1] holds every key, PEXPIRE them all to
// ARGV[2]: OK, else false.
func redislockRefresh(ctx context.Context, c *call) (Reply, error) {
	_, held, err := c.allHeldCheck(ctx)
	if err != nil || !held {
		return orErr(replyNull, err)
	}
	tok, _ := c.arg(1)
	ttl, ok := c.arg(2)
	ms, err := expireArg(ttl, ok, "pexpire")
	if err != nil {
		return Reply{}, err
	}
	for _, k := range c.keys {
		if _, err := c.pexpire(ctx, k, tok, ms); err != nil {
			return Reply{}, err
		}
	}
	return replyOK, nil
}

// redislockPTTLMulti: when ARGV[1] holds every key, the least positive PTTL
// (0 if none has a TTL), else false.
func redislockPTTLMulti(ctx context.Context, c *call) (Reply, error) {
	sts, held, err := c.allHeldCheck(ctx)
	if err != nil || !held {
		return orErr(replyNull, err)
	}
	least := int64(0)
	for _, st := range sts {
		if st.pttl > 0 && (least == 0 || st.pttl < least) {
			least = st.pttl
		}
	}
	return intReply(least), nil
}

// redislockObtain (v0.9.4): SET NX PX ARGV[3]: OK; else, when the value's
// first ARGV[2] bytes equal the token's (the same lock re-obtained), SET
// ARGV[1] PX ARGV[3]: OK; else nil.
func redislockObtain(ctx context.Context, c *call) (Reply, error) {
	key, err := c.key(1)
	if err != nil {
		return Reply{}, err
	}
	tok, tokOK := c.arg(1)
	ttl, ttlOK := c.arg(3)
	if !tokOK || !ttlOK {
		return Reply{}, errLuaArg
	}
	ms, err := expireArg(ttl, true, "set")
	if err != nil {
		return Reply{}, err
	}
	if ok, err := c.l.SetNX(ctx, key, tok, duration(ms)); err != nil || ok {
		return orErr(replyOK, err)
	}
	st, err := c.get(ctx, key)
	if err != nil {
		return Reply{}, err
	}
	return c.override(ctx, []lockState{st}, tok, func() (int64, error) { return ms, nil })
}

// redislockObtainMulti (v0.10): MSETNX every key to ARGV[1]; if one exists,
// false unless each key's value starts as the token does (ARGV[2] bytes),
// else MSET; then PEXPIRE every key to ARGV[3]: OK.
//
// Unlike Redis, a bad ARGV[3] fails before any key is set (Redis would leave
// them set with no TTL), and a missing ARGV[1] is an arity error whatever
// the number of keys (Redis would MSETNX the keys onto each other, or fail
// with MSETNX's own arity error). A re-obtain over a value with other
// metadata is a Del then a SetNX, not one atomic SET.
func redislockObtainMulti(ctx context.Context, c *call) (Reply, error) {
	tok, tokOK := c.arg(1)
	if len(c.keys) == 0 || !tokOK {
		return Reply{}, errArity
	}
	sts, err := c.getAll(ctx)
	if err != nil {
		return Reply{}, err
	}
	ttl, ttlOK := c.arg(3)
	pexpireTTL := func() (int64, error) { return expireArg(ttl, ttlOK, "pexpire") }
	if anyHeld(sts) {
		return c.override(ctx, sts, tok, pexpireTTL)
	}
	ms, err := pexpireTTL()
	if err != nil || ms <= 0 {
		return orErr(replyOK, err) // set, then expired at once
	}
	ok, err := c.takeAll(ctx, c.keys, tok, ms)
	return orErr(boolReply(ok, replyOK, replyNull), err)
}

func anyHeld(sts []lockState) bool {
	for _, st := range sts {
		if st.held {
			return true
		}
	}
	return false
}

// override is redislock's re-obtain: unless every key's value starts as the
// token does (ARGV[2] bytes, compared as GETRANGE and string.sub do) it
// replies false; else it sets every key to the token with the TTL ttl
// returns: OK. sts are the keys' states, in c.keys order.
func (c *call) override(ctx context.Context, sts []lockState, tok string, ttl func() (int64, error)) (Reply, error) {
	match, err := c.prefixMatch(sts, tok)
	if err != nil || !match {
		return orErr(replyNull, err)
	}
	ms, err := ttl()
	if err != nil {
		return Reply{}, err
	}
	var taken []string
	done := make(map[string]bool, len(sts))
	for i, st := range sts {
		key := c.keys[i]
		if done[key] {
			continue
		}
		ok, err := c.replace(ctx, key, st, tok, ms)
		if err != nil || !ok { // changed meanwhile
			return orErr(replyNull, errors.Join(err, c.rollback(ctx, taken, tok)))
		}
		if !st.held && ms > 0 {
			taken = append(taken, key)
		}
		done[key] = true
	}
	return replyOK, nil
}

// prefixMatch is, for every key, `GETRANGE(key, 0, offset-1) ==
// string.sub(ARGV[1], 1, offset)` with `offset = tonumber(ARGV[2])`.
func (c *call) prefixMatch(sts []lockState, tok string) (bool, error) {
	s, ok := c.arg(2)
	offset, isNum := luaStrToNumber(s)
	if !ok || !isNum {
		return false, errArithNil // tonumber gave nil; offset-1 fails
	}
	end, ok := string2ll(redisArg(offset - 1))
	if !ok {
		return false, errNotInt // GETRANGE's end argument
	}
	want := strSub(tok, 1, int64(offset))
	for _, st := range sts {
		if getRange(st.value(), 0, end) != want {
			return false, nil
		}
	}
	return true, nil
}
