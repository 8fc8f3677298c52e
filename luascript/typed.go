package luascript

import "strings"

// The parts of a key derived from KEYS (KEYS[1] .. ':' .. n) must be values
// the check can type: strings and numbers it can see. Concatenating a
// string with such a value gives a string that begins with the string; a
// value the check cannot type (a parameter, a function's result, a table)
// could carry a metatable whose __concat returns any string, so a
// concatenation with one is refused. Metatables themselves are refused
// (forbidden in admit.go); typing is the second wall.

// numberVal stands for the value of a numeric for's variable: a number.
var numberVal = &expr{kind: eConst, text: "0"}

// scalarReply are the commands whose reply is an integer, a bulk string or
// nil (false in Lua): never a table.
var scalarReply = map[string]bool{
	"get": true, "getset": true, "getdel": true, "getex": true, "getrange": true, "substr": true,
	"strlen": true, "incr": true, "incrby": true, "decr": true, "decrby": true, "incrbyfloat": true,
	"append": true, "setrange": true, "setnx": true, "getbit": true, "setbit": true, "bitcount": true,
	"exists": true, "del": true, "unlink": true, "ttl": true, "pttl": true, "expiretime": true, "pexpiretime": true,
	"expire": true, "pexpire": true, "expireat": true, "pexpireat": true, "persist": true,
	"hget": true, "hexists": true, "hincrby": true, "hincrbyfloat": true, "hlen": true, "hstrlen": true,
	"hset": true, "hsetnx": true, "hdel": true,
	"lindex": true, "llen": true, "lpush": true, "rpush": true, "lpushx": true, "rpushx": true,
	"linsert": true, "lrem": true,
	"sadd": true, "srem": true, "scard": true, "sismember": true,
	"zadd": true, "zrem": true, "zscore": true, "zincrby": true, "zcard": true, "zcount": true,
	"zrank": true, "zrevrank": true, "zlexcount": true,
}

// arrayReply are the commands whose reply is an array of bulk strings (or
// nils): an element of it, as `for _, f in ipairs(redis.call('hkeys', k))`
// gives, is typed.
var arrayReply = map[string]bool{
	"hkeys": true, "hvals": true, "hmget": true, "mget": true, "lrange": true, "smembers": true,
	"zrange": true, "zrevrange": true, "zrangebyscore": true, "zrevrangebyscore": true,
	"zrangebylex": true, "zrevrangebylex": true,
}

// arithmetic are the operators whose result is a number (or an error).
var arithmetic = map[string]bool{"+": true, "-": true, "*": true, "/": true, "%": true, "^": true}

// isTyped reports whether e's value is a string or a number the check can
// see: a literal, KEYS[i], ARGV[i] (ARGV unchanged), an element of a
// typed array, arithmetic or concatenation of typed values, tonumber or
// tostring of one, a redis.call with a scalar reply, or a name bound only
// to such values.
func (a *admission) isTyped(e *expr) bool {
	if e == nil {
		return false
	}
	switch e.kind {
	case eString:
		return true
	case eConst:
		return e.text != "nil" && e.text != "true" && e.text != "false"
	case eName:
		return a.typedVars[e.text]
	case eParen:
		return a.isTyped(e.obj)
	case eIndex:
		return isName(e.obj, "KEYS") || isName(e.obj, "ARGV") && a.argvChanged == 0 || a.isTypedArray(e.obj)
	case eBinop:
		return (e.text == ".." || arithmetic[e.text]) && a.isTyped(e.obj) && a.isTyped(e.sub)
	case eUnop:
		return e.text == "-" && a.isTyped(e.obj) ||
			e.text == "#" && (a.isTyped(e.obj) || isName(e.obj, "KEYS") || isName(e.obj, "ARGV"))
	case eCall:
		if isName(e.obj, "tonumber") || isName(e.obj, "tostring") {
			return len(e.args) == 1 && a.isTyped(e.args[0])
		}
		return scalarReply[redisCallName(e, false)]
	}
	return false
}

// isTypedArray reports whether e is a redis.call whose reply is an array of
// strings, or a name bound only to such calls.
func (a *admission) isTypedArray(e *expr) bool {
	switch {
	case e == nil:
		return false
	case e.kind == eName:
		return a.arrayVars[e.text]
	case e.kind == eParen:
		return a.isTypedArray(e.obj)
	}
	return arrayReply[redisCallName(e, false)]
}

// redisCallName is the lower-cased command of redis.call('<name>', ...)
// (or redis.pcall's, when pcall), "" when e is not such a call.
func redisCallName(e *expr, pcall bool) string {
	if e.kind != eCall || e.obj.kind != eField || !isName(e.obj.obj, "redis") || len(e.args) == 0 || e.args[0].kind != eString {
		return ""
	}
	if e.obj.text != "call" && !(pcall && e.obj.text == "pcall") {
		return ""
	}
	return strings.ToLower(unquoteCanonical(e.args[0].text))
}

// scanARGV records in argvChanged the first line where block may change
// ARGV: it assigns an element, or uses ARGV other than as ARGV[i], #ARGV
// or unpack(ARGV) (handing it to a function that may change it). Binding
// the name ARGV is recorded by bind.
func (a *admission) scanARGV(block []*stat) {
	for _, s := range block {
		for _, t := range s.targets {
			if (t.kind == eIndex || t.kind == eField) && isName(t.obj, "ARGV") {
				a.argvChangedAt(s.line)
			}
			if t.kind != eName {
				a.scanARGVExpr(t.obj)
				a.scanARGVExpr(t.sub)
			}
		}
		for _, e := range s.exprs {
			a.scanARGVExpr(e)
		}
		if s.fn != nil {
			a.scanARGV(s.fn.body)
		}
		for _, b := range s.blocks {
			a.scanARGV(b)
		}
	}
}

func (a *admission) scanARGVExpr(e *expr) {
	switch {
	case e == nil:
		return
	case isName(e, "ARGV"):
		a.argvChangedAt(e.line)
		return
	case e.kind == eIndex && isName(e.obj, "ARGV"):
		a.scanARGVExpr(e.sub)
		return
	case e.kind == eUnop && e.text == "#" && isName(e.obj, "ARGV"), isCallOf(e, "unpack", "ARGV"):
		return
	case e.fn != nil:
		a.scanARGV(e.fn.body)
	}
	a.scanARGVExpr(e.obj)
	a.scanARGVExpr(e.sub)
	for _, x := range e.args {
		a.scanARGVExpr(x)
	}
}

func (a *admission) argvChangedAt(line int) {
	if a.argvChanged == 0 {
		a.argvChanged = line
	}
}
