package luascript

import (
	"fmt"
	"strings"
)

// A generator of Lua scripts for FuzzAdmitOnRedis: each byte of the fuzz
// input picks one production of a small grammar that covers what issue 26
// found — metatables (__concat, __index), concatenations onto KEYS[i],
// ARGV and KEYS indexing, locals reassigned, functions, loops over replies,
// rawset/getmetatable/unpack bounds, PUBLISH, random commands. Every loop
// is bounded (ipairs over short arrays, for i = 1, 2), and a function only
// calls functions defined before it, so every script ends.

// Statement productions (the first byte of a statement).
const (
	gLocal  = iota // local vN = <value>
	gCall          // redis.call/pcall(<command>, <key>, <value>)
	gMeta          // local vN = setmetatable({}, {__concat = ..., __index = ...})
	gIpairs        // for _, vN in ipairs(<array>) do <statement> end
	gNumFor        // for vN = 1, 2 do <statement> end
	gIf            // if <value> then <statement> end
	gAssign        // vK = <value>, or ARGV[i] = <value>
	gFunc          // local function fN(a) return <value> end
	gTrick         // rawset, getmetatable(''), unpack with bounds, table.insert(ARGV, ...)
	gStatements
)

// Value productions.
const (
	vKey      = iota // KEYS[i]
	vArg             // ARGV[i]
	vString          // a string literal
	vNumber          // a number
	vVar             // an existing local
	vConcat          // <value> .. <value>
	vReply           // redis.call('get'|'incr'|'hget'|'lindex', <key>...)
	vConvert         // tostring(<value>) / tonumber(<value>)
	vFuncCall        // fK(<value>)
	vArith           // <value> + 1, #KEYS, (<value>)
	vTable           // {} or {<value>}
	vValues
)

// genCommands are the commands a generated call names: allowed ones, a
// refused random one (SPOP), the random reads, and some that are refused.
var genCommands = []string{"get", "set", "del", "incr", "hset", "hget", "publish", "exists", "rename",
	"rpush", "pexpire", "srandmember", "spop", "time", "hkeys", "append", "sadd", "flushall", "spublish"}

var genStrings = []string{"victim", ":", "lockproxy:", "", "lockproxy:released", "x"}

type gen struct {
	data  []byte
	pos   int
	vars  int // locals v1..vars
	funcs int // functions f1..funcs
	b     strings.Builder
}

// generate turns data into a Lua script.
func generate(data []byte) string {
	g := &gen{data: data}
	for n := 1 + g.choose(4); n > 0 && g.pos < len(g.data); n-- {
		g.statement(0)
	}
	g.b.WriteString("return 1\n")
	return g.b.String()
}

// choose is the next input byte modulo n (0 once the input is used up).
func (g *gen) choose(n int) int {
	if g.pos >= len(g.data) {
		return 0
	}
	g.pos++
	return int(g.data[g.pos-1]) % n
}

func (g *gen) statement(depth int) {
	kind := g.choose(gStatements)
	if depth > 1 && (kind == gIpairs || kind == gNumFor || kind == gIf) {
		kind = gCall
	}
	switch kind {
	case gLocal:
		v := g.value(depth)
		g.vars++
		fmt.Fprintf(&g.b, "local v%d = %s\n", g.vars, v)
	case gCall:
		g.b.WriteString(g.call(depth) + "\n")
	case gMeta:
		c, i := g.value(depth+1), g.value(depth+1)
		g.vars++
		fmt.Fprintf(&g.b, "local v%d = setmetatable({}, {__concat = function(a, b) return %s end, __index = function(t, k) return %s end})\n", g.vars, c, i)
	case gIpairs:
		arr := g.array(depth)
		g.vars++
		fmt.Fprintf(&g.b, "for _, v%d in ipairs(%s) do\n", g.vars, arr)
		g.statement(depth + 1)
		g.b.WriteString("end\n")
	case gNumFor:
		g.vars++
		fmt.Fprintf(&g.b, "for v%d = 1, 2 do\n", g.vars)
		g.statement(depth + 1)
		g.b.WriteString("end\n")
	case gIf:
		fmt.Fprintf(&g.b, "if %s then\n", g.value(depth))
		g.statement(depth + 1)
		g.b.WriteString("end\n")
	case gAssign:
		g.assign(depth)
	case gFunc:
		body := g.value(depth + 1) // before the name: no recursion
		g.funcs++
		fmt.Fprintf(&g.b, "local function f%d(a) return %s end\n", g.funcs, body)
	case gTrick:
		g.trick(depth)
	}
}

func (g *gen) assign(depth int) {
	v := g.value(depth)
	if g.vars == 0 || g.choose(3) == 0 {
		fmt.Fprintf(&g.b, "ARGV[%d] = %s\n", 1+g.choose(4), v)
		return
	}
	fmt.Fprintf(&g.b, "v%d = %s\n", 1+g.choose(g.vars), v)
}

func (g *gen) trick(depth int) {
	v := g.value(depth + 1)
	trick := g.choose(5)
	if trick == 2 && depth > 0 {
		trick = 1 // growing ARGV inside ipairs(ARGV) would never end
	}
	switch trick {
	case 0:
		fmt.Fprintf(&g.b, "getmetatable('').__concat = function(a, b) return %s end\n", v)
	case 1:
		fmt.Fprintf(&g.b, "rawset(KEYS, 1, %s)\n", v)
	case 2:
		fmt.Fprintf(&g.b, "table.insert(ARGV, 1, %s)\n", v)
	case 3:
		fmt.Fprintf(&g.b, "redis.call('del', unpack(KEYS, 1, %d))\n", 1+g.choose(3))
	default:
		fmt.Fprintf(&g.b, "debug.setmetatable(%s, {__concat = function() return ARGV[1] end})\n", v)
	}
}

// call is a redis.call or redis.pcall with a generated command and
// arguments; its first argument is key-like most of the time.
func (g *gen) call(depth int) string {
	fn := []string{"call", "pcall"}[g.choose(2)]
	cmd := genCommands[g.choose(len(genCommands))]
	switch cmd {
	case "time", "flushall":
		return fmt.Sprintf("redis.%s('%s')", fn, cmd)
	case "rename":
		return fmt.Sprintf("redis.%s('%s', %s, %s)", fn, cmd, g.key(depth), g.key(depth))
	case "hset":
		return fmt.Sprintf("redis.%s('%s', %s, %s, %s)", fn, cmd, g.key(depth), g.value(depth+1), g.value(depth+1))
	case "pexpire":
		return fmt.Sprintf("redis.%s('%s', %s, 60000)", fn, cmd, g.key(depth))
	case "get", "del", "incr", "exists", "spop", "srandmember", "hkeys":
		return fmt.Sprintf("redis.%s('%s', %s)", fn, cmd, g.key(depth))
	}
	return fmt.Sprintf("redis.%s('%s', %s, %s)", fn, cmd, g.key(depth), g.value(depth+1))
}

// key is a value that looks like a key: KEYS[i] concatenated with
// something, or any value.
func (g *gen) key(depth int) string {
	if g.choose(2) == 0 {
		return fmt.Sprintf("KEYS[%d] .. %s", 1+g.choose(2), g.value(depth+1))
	}
	return g.value(depth + 1)
}

func (g *gen) value(depth int) string {
	kind := g.choose(vValues)
	if depth > 3 && kind >= vConcat {
		kind = vKey
	}
	switch kind {
	case vKey:
		return fmt.Sprintf("KEYS[%d]", 1+g.choose(3))
	case vArg:
		return fmt.Sprintf("ARGV[%d]", 1+g.choose(4))
	case vString:
		return fmt.Sprintf("%q", genStrings[g.choose(len(genStrings))])
	case vNumber:
		return []string{"1", "7", "-1", "2.5"}[g.choose(4)]
	case vVar:
		if g.vars == 0 {
			return "KEYS[1]"
		}
		return fmt.Sprintf("v%d", 1+g.choose(g.vars))
	case vConcat:
		return g.value(depth+1) + " .. " + g.value(depth+1)
	case vReply:
		return g.reply(depth)
	case vConvert:
		return fmt.Sprintf("%s(%s)", []string{"tostring", "tonumber"}[g.choose(2)], g.value(depth+1))
	case vFuncCall:
		if g.funcs == 0 {
			return "ARGV[1]"
		}
		return fmt.Sprintf("f%d(%s)", 1+g.choose(g.funcs), g.value(depth+1))
	case vArith:
		switch g.choose(3) {
		case 0:
			return "(" + g.value(depth+1) + ")"
		case 1:
			return "#KEYS"
		}
		return "(" + g.value(depth+1) + " + 1)"
	}
	if g.choose(2) == 0 {
		return "{}"
	}
	return "{" + g.value(depth+1) + "}"
}

// array is what a generated ipairs loops over.
func (g *gen) array(depth int) string {
	switch g.choose(4) {
	case 0:
		return "KEYS"
	case 1:
		return "ARGV"
	case 2:
		return "redis.call('hkeys', KEYS[2])"
	}
	return "{" + g.value(depth+1) + "}"
}

func (g *gen) reply(depth int) string {
	switch g.choose(4) {
	case 0:
		return fmt.Sprintf("redis.call('get', %s)", g.key(depth+1))
	case 1:
		return fmt.Sprintf("redis.call('incr', %s)", g.key(depth+1))
	case 2:
		return fmt.Sprintf("redis.call('hget', KEYS[2], %s)", g.value(depth+1))
	}
	return fmt.Sprintf("redis.pcall('lindex', %s, 0)", g.key(depth+1))
}

// seed spells a generator input from productions, for the seed corpus.
func seed(choices ...int) []byte {
	out := make([]byte, len(choices))
	for i, c := range choices {
		out[i] = byte(c)
	}
	return out
}
