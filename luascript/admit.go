package luascript

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// Admitted is a script outside the catalog that the admission check let
// through: lockproxy runs it unchanged on every node (quorum.Eval).
type Admitted struct {
	SHA string // Redis's name for it: the SHA1 of Src
	Src []byte
	// ReadsTime is true when the script calls TTL, PTTL, EXPIRETIME or
	// PEXPIRETIME: integers in its reply may be remaining times, which
	// differ a little from node to node.
	ReadsTime bool
	// Writes is true when the script calls a command that writes.
	Writes bool
	// SetsTTL is true when the script calls a command that sets a key's
	// TTL (EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, GETEX): a lock bound to
	// its connection whose key it is becomes a lease, as with PEXPIRE.
	// TTLKeys are then the n of the KEYS[n] it names literally, ascending;
	// nil when it may name any key of KEYS.
	SetsTTL bool
	TTLKeys []int
	// DerivesKeys is true when a key (or channel) argument is built from
	// a key of KEYS by concatenation (KEYS[1] .. ':x'): the script may
	// touch keys that begin with a key of KEYS without being one. Without
	// it, every key and channel the script can name is an element of KEYS.
	DerivesKeys bool
	// PublishFromARGV lists the indexes n (from 1, ascending, no repeats)
	// of calls written redis.call(ARGV[n], ...): the command is taken from
	// ARGV[n], and the check admitted it as PUBLISH (arguments checked as
	// PUBLISH's: no key). Redisson 3.22 and later pass "publish" (or
	// "spublish") this way. CheckARGV checks the values before a run.
	PublishFromARGV []int
	// Memo is what a backend derives from the script once (upstream: the
	// script wrapped in its turn's guard). It lives as long as the
	// Admitted, so the script cache's bound (legacy.max_scripts) bounds it
	// too.
	Memo atomic.Value
}

// publishCommands are the commands ARGV[n] may name where a script takes
// its command from ARGV (Admitted.PublishFromARGV).
var publishCommands = map[string]bool{"publish": true, "spublish": true}

// CheckARGV checks, before the script reaches any node, that every ARGV[n]
// the script takes a command from is there and is PUBLISH or SPUBLISH
// (in any case).
func (s *Admitted) CheckARGV(argv [][]byte) error {
	for _, n := range s.PublishFromARGV {
		if n > len(argv) {
			return fmt.Errorf("ERR lockproxy refused this script before running it on any node: it takes a command from ARGV[%d], "+
				"which must be PUBLISH or SPUBLISH, and only %d arguments were given (docs/lock-scripts.md)", n, len(argv))
		}
		if !publishCommands[strings.ToLower(string(argv[n-1]))] {
			return fmt.Errorf("ERR lockproxy refused this script before running it on any node: it takes a command from ARGV[%d], "+
				"which must be PUBLISH or SPUBLISH, not '%s' (docs/lock-scripts.md)", n, oneLine(string(argv[n-1])))
		}
	}
	return nil
}

// AdmitError is the refusal of a script outside the catalog, with the
// line and the reason. Its text is the client's reply.
type AdmitError struct {
	Line int
	Msg  string
}

func (e *AdmitError) Error() string {
	return fmt.Sprintf("ERR lockproxy refused this script before running it on any node: line %d: %s (docs/lock-scripts.md)", e.Line, e.Msg)
}

// Admit checks, without running it, that src only calls the data commands
// lock scripts use (commands.go), names each command by a string literal,
// and takes every key argument from KEYS: KEYS[i], a local set only from
// such an expression, the value of `for _, k in ipairs(KEYS)`,
// unpack(KEYS), or a concatenation whose leftmost operand is one of these
// (so a key derived from KEYS keeps KEYS's database prefix). Anything it
// cannot tell is refused with an *AdmitError saying why.
func Admit(src []byte) (*Admitted, error) {
	block, err := parse(src)
	if err != nil {
		pe, ok := err.(*ParseError)
		if !ok {
			return nil, &AdmitError{Msg: err.Error()}
		}
		return nil, &AdmitError{Line: pe.Line, Msg: "cannot parse the script: " + pe.Msg}
	}
	a := &admission{bindings: map[string][]*expr{}}
	a.bindBlock(block)
	if a.err != nil {
		return nil, a.err
	}
	a.scanARGV(block)
	a.findKeyVars()
	a.checkBlock(block)
	a.checkRandom()
	if a.err != nil {
		return nil, a.err
	}
	if len(a.fromARGV) > 0 && a.argvChanged > 0 {
		return nil, &AdmitError{Line: a.argvChanged, Msg: "the script takes a command from ARGV and may change ARGV (it assigns ARGV or an element, or hands ARGV to a function other than unpack)"}
	}
	var pub []int
	for n := range a.fromARGV {
		pub = append(pub, n)
	}
	sort.Ints(pub)
	adm := &Admitted{SHA: SHA1(src), Src: src, ReadsTime: a.readsTime, Writes: a.writes, DerivesKeys: a.derives, PublishFromARGV: pub}
	adm.SetsTTL, adm.TTLKeys = len(a.ttlKeys) > 0, sortedKeys(a.ttlKeys)
	return adm, nil
}

// sortedKeys is the n > 0 of set, ascending; nil when set holds 0 (any).
func sortedKeys(set map[int]bool) []int {
	if set[0] {
		return nil
	}
	var out []int
	for n := range set {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// admission is the state of one check.
type admission struct {
	// bindings lists, per name, every value the script binds it to: an
	// expression, or nil for a value that is not one (a parameter, a
	// numeric for, a missing value); keyElem stands for the value of
	// `for _, k in ipairs(KEYS)`.
	bindings  map[string][]*expr
	keyVars   map[string]bool
	plainVars map[string]bool // key variables bound only to KEYS[i] or other plain ones
	typedVars map[string]bool // names bound only to strings or numbers the check can see (typed.go)
	arrayVars map[string]bool // names bound only to a redis.call's array of strings
	ttlKeys   map[int]bool    // the n of KEYS[n] a TTL-setting call names; 0: any
	// random is the first call of a command whose result differs from
	// node to node (SRANDMEMBER, TIME, ...): refused if the script writes.
	random *expr
	// untypedString is the first tostring of a value the check cannot
	// type: a table's or function's address, different on each node, is
	// refused in a script that writes.
	untypedString *expr
	derives       bool
	readsTime     bool
	writes        bool
	// fromARGV are the n of redis.call(ARGV[n], ...); argvChanged is the
	// line of a statement that assigns ARGV or one of its elements (0:
	// none), which such a script may not do.
	fromARGV    map[int]bool
	argvChanged int
	err         *AdmitError
}

var keyElem = &expr{kind: eIndex, obj: &expr{kind: eName, text: "KEYS"}, sub: &expr{kind: eConst, text: "1"}}

// fixed are names a script must not bind: rebinding them would change what
// the check relies on (tonumber and tostring type the parts of a derived
// key, typed.go).
var fixed = map[string]bool{"KEYS": true, "redis": true, "ipairs": true, "unpack": true, "tonumber": true, "tostring": true}

// forbidden are globals that run code the check cannot see or reach the
// script's environment.
var forbidden = map[string]bool{
	"loadstring": true, "load": true, "loadfile": true, "dofile": true, "getfenv": true, "setfenv": true,
	"_G": true, "rawget": true, "rawset": true, "rawequal": true, "require": true, "module": true,
	"package": true, "debug": true, "newproxy": true, "coroutine": true,
	// A value with a metatable changes meaning at run time: its __concat
	// (KEYS[1] .. t) or __index can turn a key derived from KEYS into any
	// string.
	"setmetatable": true, "getmetatable": true,
}

// redisFields are the fields of the redis table a script may use besides
// call and pcall.
var redisFields = map[string]bool{
	"error_reply": true, "status_reply": true, "sha1hex": true, "log": true,
	"LOG_DEBUG": true, "LOG_VERBOSE": true, "LOG_NOTICE": true, "LOG_WARNING": true,
}

func (a *admission) refuse(line int, format string, args ...any) {
	if a.err == nil {
		a.err = &AdmitError{Line: line, Msg: fmt.Sprintf(format, args...)}
	}
}

func (a *admission) bind(line int, name string, value *expr) {
	if name == "ARGV" && a.argvChanged == 0 {
		a.argvChanged = line
	}
	if fixed[name] || forbidden[name] {
		a.refuse(line, "the script rebinds %s", name)
	}
	a.bindings[name] = append(a.bindings[name], value)
}

// bindBlock records every binding of a name in block and the blocks and
// functions inside it.
func (a *admission) bindBlock(block []*stat) {
	for _, s := range block {
		switch s.kind {
		case sLocal:
			a.bindList(s.line, s.names, s.exprs)
		case sAssign:
			for i, t := range s.targets {
				if t.kind == eName {
					a.bindList(s.line, []string{t.text}, valueAt(s.exprs, i))
				}
			}
		case sNumFor:
			a.bind(s.line, s.names[0], numberVal)
		case sGenFor:
			elem := (*expr)(nil)
			if len(s.exprs) == 1 && isCallOfKEYS(s.exprs[0], "ipairs") {
				elem = keyElem
			} else if len(s.exprs) == 1 && isName(s.exprs[0].obj, "ipairs") && len(s.exprs[0].args) == 1 {
				elem = &expr{kind: eIndex, obj: s.exprs[0].args[0], sub: numberVal} // typed if the array is
			}
			for i, n := range s.names {
				if i == 1 {
					a.bind(s.line, n, elem)
				} else {
					a.bind(s.line, n, nil)
				}
			}
		case sFunc:
			if s.targets[0].kind == eName {
				a.bind(s.line, s.targets[0].text, nil)
			}
		case sLocalFunc:
			a.bind(s.line, s.names[0], nil)
		}
		if s.fn != nil {
			a.bindFunc(s.line, s.fn)
		}
		for _, b := range s.blocks {
			a.bindBlock(b)
		}
		for _, e := range append(s.exprs, s.targets...) {
			a.bindFuncsIn(e)
		}
	}
}

// valueAt is the one-element list of exprs[i], or nil when there is none.
func valueAt(exprs []*expr, i int) []*expr {
	if i < len(exprs) {
		return exprs[i : i+1]
	}
	return nil
}

// bindList binds names to values in order; a name without a value of its
// own (fewer values, or the tail of a multiple result) binds to nil.
func (a *admission) bindList(line int, names []string, values []*expr) {
	for i, n := range names {
		var v *expr
		if i < len(values) && !(i == len(values)-1 && i < len(names)-1 && multiValued(values[i])) {
			v = values[i]
		}
		a.bind(line, n, v)
	}
}

func (a *admission) bindFunc(line int, f *funcBody) {
	for _, p := range f.params {
		a.bind(line, p, nil)
	}
	a.bindBlock(f.body)
}

// bindFuncsIn binds the parameters and bodies of the functions inside e.
func (a *admission) bindFuncsIn(e *expr) {
	if e == nil {
		return
	}
	if e.fn != nil {
		a.bindFunc(e.line, e.fn)
	}
	a.bindFuncsIn(e.obj)
	a.bindFuncsIn(e.sub)
	for _, x := range e.args {
		a.bindFuncsIn(x)
	}
}

// findKeyVars computes the names whose every binding is a key expression,
// assuming the others are: the largest such set; and among them the plain
// ones, bound only to KEYS[i] or other plain ones.
func (a *admission) findKeyVars() {
	a.keyVars, a.plainVars = map[string]bool{}, map[string]bool{}
	a.typedVars, a.arrayVars = map[string]bool{}, map[string]bool{}
	a.largestSet(a.arrayVars, a.isTypedArray)
	a.largestSet(a.typedVars, a.isTyped)
	a.largestSet(a.keyVars, a.isKeyExpr)
	a.largestSet(a.plainVars, a.isPlainKey)
}

// largestSet makes set the largest set of names whose every binding
// satisfies ok, which reads set itself.
func (a *admission) largestSet(set map[string]bool, ok func(*expr) bool) {
	for n := range a.bindings {
		set[n] = true
	}
	for changed := true; changed; {
		changed = false
		for n := range set {
			for _, v := range a.bindings[n] {
				if !ok(v) {
					delete(set, n)
					changed = true
					break
				}
			}
		}
	}
}

// isPlainKey reports whether e is a key of KEYS itself, not derived.
func (a *admission) isPlainKey(e *expr) bool {
	switch {
	case e == nil:
		return false
	case e.kind == eIndex:
		return isName(e.obj, "KEYS")
	case e.kind == eName:
		return a.plainVars[e.text]
	}
	return false
}

// isKeyExpr reports whether e's value is a key from KEYS, or a string that
// begins with one: a concatenation whose leftmost operand is a key and
// whose other parts are typed (typed.go).
func (a *admission) isKeyExpr(e *expr) bool {
	switch {
	case e == nil:
		return false
	case e.kind == eIndex:
		return isName(e.obj, "KEYS")
	case e.kind == eName:
		return a.keyVars[e.text]
	case e.kind == eBinop && e.text == "..":
		return a.isKeyExpr(e.obj) && a.isTyped(e.sub)
	}
	return false
}

func isName(e *expr, name string) bool { return e != nil && e.kind == eName && e.text == name }

// isCallOfKEYS reports whether e is fn(KEYS).
func isCallOfKEYS(e *expr, fn string) bool {
	return e.kind == eCall && isName(e.obj, fn) && len(e.args) == 1 && isName(e.args[0], "KEYS")
}

// isCallOf reports whether e is fn(arg).
func isCallOf(e *expr, fn, arg string) bool {
	return e.kind == eCall && isName(e.obj, fn) && len(e.args) == 1 && isName(e.args[0], arg)
}

// multiValued reports whether e may stand for several values at the end of
// a list.
func multiValued(e *expr) bool { return e.kind == eCall || e.kind == eMethod || e.kind == eVararg }

func (a *admission) checkBlock(block []*stat) {
	for _, s := range block {
		for _, t := range s.targets {
			a.checkTarget(s.line, t)
		}
		for _, e := range s.exprs {
			a.checkExpr(e)
		}
		if s.fn != nil {
			a.checkBlock(s.fn.body)
		}
		for _, b := range s.blocks {
			a.checkBlock(b)
		}
	}
}

// checkTarget checks an assignment's target: KEYS and redis are read-only.
func (a *admission) checkTarget(line int, t *expr) {
	switch t.kind {
	case eName:
		return // bindBlock refused the fixed names
	case eIndex, eField:
		if isName(t.obj, "ARGV") && a.argvChanged == 0 {
			a.argvChanged = line
		}
		if isName(t.obj, "KEYS") || isName(t.obj, "redis") {
			a.refuse(line, "the script changes %s", t.obj.text)
			return
		}
		a.checkExpr(t.obj)
		a.checkExpr(t.sub)
	}
}

func (a *admission) checkExpr(e *expr) {
	if e == nil || a.err != nil {
		return
	}
	switch e.kind {
	case eName:
		switch {
		case e.text == "KEYS":
			a.refuse(e.line, "KEYS may be used only as KEYS[i], #KEYS, ipairs(KEYS) or unpack(KEYS)")
		case e.text == "redis":
			a.refuse(e.line, "redis may be used only as redis.call(...), redis.pcall(...) or redis.%s", "error_reply/status_reply/sha1hex/log")
		case e.text == "setmetatable" || e.text == "getmetatable":
			a.refuse(e.line, "%s is not allowed: a metatable changes what a value means at run time (its __concat can turn KEYS[1] .. t into any key)", e.text)
		case forbidden[e.text]:
			a.refuse(e.line, "%s is not allowed: it can run code the check cannot see", e.text)
		case e.text == "ARGV" && a.argvChanged == 0:
			// ARGV handed to a function (table.remove(ARGV, 1)) may
			// change: refused below if a command comes from ARGV.
			a.argvChanged = e.line
		}
		return
	case eIndex:
		if isName(e.obj, "KEYS") || isName(e.obj, "ARGV") {
			a.checkExpr(e.sub)
			return
		}
	case eUnop:
		if e.text == "#" && (isName(e.obj, "KEYS") || isName(e.obj, "ARGV")) {
			return
		}
	case eField:
		if isName(e.obj, "redis") {
			if !redisFields[e.text] {
				a.refuse(e.line, "redis.%s is not allowed here (only redis.call(...), redis.pcall(...), redis.error_reply, redis.status_reply, redis.sha1hex, redis.log)", e.text)
			}
			return
		}
	case eCall:
		if e.obj.kind == eField && isName(e.obj.obj, "redis") && (e.obj.text == "call" || e.obj.text == "pcall") {
			a.checkRedisCall(e)
			return
		}
		if isCallOfKEYS(e, "ipairs") || isCallOfKEYS(e, "unpack") || isCallOf(e, "unpack", "ARGV") {
			return
		}
		if isName(e.obj, "tostring") && !(len(e.args) == 1 && a.isTyped(e.args[0])) && a.untypedString == nil {
			a.untypedString = e
		}
		if isName(e.obj, "unpack") && len(e.args) != 1 {
			a.refuse(e.line, "unpack with explicit bounds (unpack(t, i, j)) is not allowed: a large range overflows the Lua stack of unpatched Redis builds and crashes the node")
			return
		}
	case eFunc:
		a.checkBlock(e.fn.body)
		return
	}
	a.checkExpr(e.obj)
	a.checkExpr(e.sub)
	for _, x := range e.args {
		a.checkExpr(x)
	}
}

// checkRedisCall checks redis.call(name, args...): name is an allowed
// command, as a string literal, and every key argument comes from KEYS.
func (a *admission) checkRedisCall(e *expr) {
	fn := "redis." + e.obj.text
	if len(e.args) > 0 && e.args[0].kind == eIndex && isName(e.args[0].obj, "ARGV") {
		n, ok := literalIndex(e.args[0].sub)
		if !ok {
			a.refuse(e.line, "%s must name its command with a string literal, or with ARGV[n] for a literal n (PUBLISH or SPUBLISH only)", fn)
			return
		}
		if a.fromARGV == nil {
			a.fromARGV = map[int]bool{}
		}
		a.fromARGV[n] = true
		a.checkArgs(e, fn, "publish", allowed["publish"])
		return
	}
	if len(e.args) == 0 || e.args[0].kind != eString {
		a.refuse(e.line, "%s must name its command with a string literal (or ARGV[n] for PUBLISH/SPUBLISH)", fn)
		return
	}
	name := strings.ToLower(unquoteCanonical(e.args[0].text))
	spec, ok := allowed[name]
	if !ok {
		why := refusedBecause[name]
		if why == "" {
			why = "it is not one of the data commands lock scripts use on their own keys"
		}
		a.refuse(e.line, "%s('%s'): %s may not be used, %s", fn, oneLine(name), strings.ToUpper(oneLine(name)), why)
		return
	}
	if randomResult[name] != "" && a.random == nil {
		a.random = e
	}
	a.readsTime = a.readsTime || remainingTime[name]
	a.writes = a.writes || spec.write
	if setsTTL[name] {
		a.noteTTL(e.args[1:])
	}
	a.checkArgs(e, fn, name, spec)
}

// setsTTL are the allowed commands that may set their key's TTL.
var setsTTL = map[string]bool{"expire": true, "pexpire": true, "expireat": true, "pexpireat": true, "getex": true}

// noteTTL records the key a TTL-setting call names: KEYS[n] for a literal
// n, or any key of KEYS.
func (a *admission) noteTTL(args []*expr) {
	n, ok := 0, false
	if len(args) > 0 && args[0].kind == eIndex && isName(args[0].obj, "KEYS") {
		n, ok = literalIndex(args[0].sub)
	}
	if a.ttlKeys == nil {
		a.ttlKeys = map[int]bool{}
	}
	if !ok {
		n = 0 // any key
	}
	a.ttlKeys[n] = true
}

// checkRandom refuses a script that writes and calls a command whose
// result differs from node to node: each node could write something else.
func (a *admission) checkRandom() {
	if a.err == nil && a.writes && a.untypedString != nil {
		a.refuse(a.untypedString.line, "tostring of a value the check cannot type may not be used in a script that writes: "+
			"for a table or a function it is an address, different on each node")
	}
	if a.err != nil || !a.writes || a.random == nil {
		return
	}
	name := redisCallName(a.random, true)
	a.refuse(a.random.line, "redis.%s('%s'): %s may not be used in a script that writes: %s, so each node could write something "+
		"different; a script that only reads may call it", a.random.obj.text, name, strings.ToUpper(name), randomResult[name])
}

// literalIndex is n when e is a decimal integer literal n >= 1 that fits
// an int comfortably.
func literalIndex(e *expr) (int, bool) {
	if e == nil || e.kind != eConst || e.text == "" || len(e.text) > 6 || e.text[0] < '1' || e.text[0] > '9' {
		return 0, false
	}
	n, err := strconv.Atoi(e.text)
	return n, err == nil
}

// checkArgs checks the arguments of redis.call(name, args...) by spec:
// every key argument comes from KEYS.
func (a *admission) checkArgs(e *expr, fn, name string, spec keySpec) {
	args := e.args[1:]
	for i, arg := range args {
		pos := i + 1
		if i == len(args)-1 && multiValued(arg) && spec.keysFrom(pos) {
			if !(isCallOfKEYS(arg, "unpack") && spec.step == 1 && spec.last < 0 && pos >= spec.first) {
				a.refuse(arg.line, "%s('%s'): argument %d may expand to several values, some of them keys; keys must come from KEYS", fn, name, pos)
				return
			}
			a.checkExpr(arg)
			continue
		}
		if a.checkExpr(arg); a.err != nil {
			return
		}
		if spec.isKey(pos) && a.isKeyExpr(arg) && !a.isPlainKey(arg) {
			a.derives = true
		}
		if spec.isKey(pos) && !a.isKeyExpr(arg) {
			a.refuse(arg.line, "%s('%s'): argument %d is a %s and must come from KEYS (KEYS[i], a local set only from KEYS, "+
				"the value of `for _, k in ipairs(KEYS)`, unpack(KEYS), or a concatenation that begins with one of these "+
				"and whose other parts are strings, numbers, ARGV[i] or replies the check can type)", fn, name, pos, spec.what())
			return
		}
	}
}

// oneLine keeps a name from a script fit for a one-line error reply.
func oneLine(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
