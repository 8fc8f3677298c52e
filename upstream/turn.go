package upstream

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/quorum"
)

// Turns (quorum/turn.go). A script outside the catalog that writes runs
// on a node only while the node's turn keys of its KEYS hold the turn's
// token: <prefix>turn:<key> for each key as the node names it (a SELECTed
// database's key included, since the key already names its database).
// turn.lua takes them, turnback.lua gives them back, and the script
// itself is sent wrapped in a guard that checks them atomically with it.

var (
	//go:embed scripts/turn.lua
	turnLua string
	//go:embed scripts/turnback.lua
	turnBackLua string
	//go:embed scripts/repair.lua
	repairLua string

	turnScript     = newScript("turn", turnLua)
	turnBackScript = newScript("turnback", turnBackLua)
	repairScript   = newScript("repair", repairLua)
)

func init() { scripts = append(scripts, turnScript, turnBackScript, repairScript) }

// turnKey is the key that holds the turn on key.
func (n *RedisNode) turnKey(key string) string { return n.prefix + "turn:" + key }

func (n *RedisNode) turnKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = n.turnKey(k)
	}
	return out
}

// turnRefused is the start of the guard's error reply when a turn key
// does not hold the token; the token follows, so that no script of a
// client can pass for it.
const turnRefused = "LOCKPROXY_TURN "

// Guard builds the source that runs src only while the turn keys hold the
// token. The guarded script gets the client's KEYS followed by the turn
// keys, and the client's ARGV followed by the number of turn keys and the
// token; the guard takes those off the ends of KEYS and ARGV, so that the
// body sees the client's tables exactly, checks every turn key, and then
// calls the body: src unchanged, as the body of a vararg function called
// with no arguments, as Redis calls a script's chunk (... is empty). The
// guard and the function's head share the first line of src, so that an
// error the body raises names the line it names under Redis; a first line
// that is a shebang (#!lua ...) stays first, on its own. The body is its
// own function, so its locals, upvalues and a top-level return are its
// own as in a chunk; src ending in a comment without a newline is closed
// by the newline before "end".
func Guard(src string) string { return guard(src, false) }

// GuardStated is Guard whose script also reports, in the same atomic step,
// the state each key of the client's KEYS is left in (quorum/repair.go):
// its reply is an array of the body's reply (nil as a null), then, for
// each KEYS[i] in order, the key's PTTL and its DUMP (a null for no key),
// or -3 and a null when the node cannot DUMP it. Lua turns a reply nested
// in an array into RESP as it turns a script's own reply, so the body's
// reply reads the same. A body that raises an error raises it unchanged,
// with no states. It gets the release marks of the turn's keys between the
// client's KEYS and the turn keys, and raises each that exists by one
// before the body runs (repair.lua does so on a RESTORE).
func GuardStated(src string) string { return guard(src, true) }

func guard(src string, stated bool) string {
	var b strings.Builder
	body := src
	if strings.HasPrefix(src, "#!") {
		line, rest, _ := strings.Cut(src, "\n")
		b.WriteString(line + "\n")
		body = rest
	}
	b.WriteString(`local __lp_tok = table.remove(ARGV) local __lp_n = tonumber(table.remove(ARGV)) ` +
		`for __lp_i = 1, __lp_n do if redis.call('GET', table.remove(KEYS)) ~= __lp_tok then ` +
		`return redis.error_reply('` + turnRefused + `' .. __lp_tok .. ' the turn on the script\'s keys is not this script\'s on this node') end end `)
	b.WriteString(`local function __lp_body(...) `)
	b.WriteString(body)
	if !stated {
		b.WriteString("\nend return __lp_body()")
		return b.String()
	}
	// The keys' release marks come off KEYS after the body is defined, so
	// that it cannot name their table, and each is raised by one, where
	// there is one, before the body runs (a body that fails keeps what it
	// wrote): the body may take a lock key on this node, which must void
	// the heals decided before it (heal.lua), as an acquire's take does
	// (acquire.lua's taken). tostring writes a mark (a moment in ms)
	// exactly below 10^14, and the admission check keeps the body from
	// rebinding it, ipairs, unpack and tonumber.
	b.WriteString("\nend local __lp_m = {} for __lp_i = 1, __lp_n do __lp_m[__lp_i] = table.remove(KEYS) end " +
		"for __lp_i = 1, #__lp_m, 100 do local __lp_j = __lp_i + 99 if __lp_j > #__lp_m then __lp_j = #__lp_m end " +
		"if redis.call('EXISTS', unpack(__lp_m, __lp_i, __lp_j)) > 0 then " +
		"for _, __lp_k in ipairs(__lp_m) do local __lp_v = tonumber(redis.pcall('GET', __lp_k)) if __lp_v then " +
		"redis.call('SET', __lp_k, tostring(__lp_v + 1), 'KEEPTTL') end end break end end " +
		"local __lp_r = __lp_body() if __lp_r == nil then __lp_r = false end " +
		"local __lp_s = {__lp_r} for __lp_i = 1, #KEYS do local __lp_d = redis.pcall('DUMP', KEYS[__lp_i]) " +
		"if type(__lp_d) == 'table' then __lp_s[#__lp_s + 1] = -3 __lp_s[#__lp_s + 1] = false " +
		"else __lp_s[#__lp_s + 1] = redis.call('PTTL', KEYS[__lp_i]) __lp_s[#__lp_s + 1] = __lp_d end end return __lp_s")
	return b.String()
}

// guarded is an admitted script wrapped by Guard and by GuardStated.
type guarded struct{ plain, stated *script }

// guardedScript is s guarded by its turn (stated: GuardStated), made
// once per admitted script and kept in its Memo: a map here would keep
// every script clients ever sent (scripts that inline their values are
// all different), where the Memo goes when the script cache drops the
// script.
func guardedScript(s *luascript.Admitted, stated bool) *script {
	g, ok := s.Memo.Load().(*guarded)
	if !ok {
		g = &guarded{plain: newScript("script "+s.SHA+" (guarded by its turn)", Guard(string(s.Src))),
			stated: newScript("script "+s.SHA+" (guarded by its turn, with its keys' states)", GuardStated(string(s.Src)))}
		s.Memo.Store(g)
	}
	if stated {
		return g.stated
	}
	return g.plain
}

// turnFor is the script and arguments of an OpTurn, an OpTurnBack, or an
// OpEval guarded by its turn.
func (n *RedisNode) turnFor(op *quorum.Op) (*script, []string, []any) {
	switch op.Kind {
	case quorum.OpTurn:
		return turnScript, n.turnKeys(op.Keys), []any{op.Token, millis(op.TTL)}
	case quorum.OpTurnBack:
		return turnBackScript, n.turnKeys(op.Keys), []any{op.Token}
	case quorum.OpRepair:
		return n.repairFor(op)
	}
	turns := uniqueSorted(op.Keys)
	keys := append(make([]string, 0, len(op.Keys)+2*len(turns)), op.Keys...)
	if op.State {
		keys = append(keys, n.releasedKeys(turns)...)
	}
	keys = append(keys, n.turnKeys(turns)...)
	args := make([]any, 0, len(op.Args)+2)
	for _, a := range op.Args {
		args = append(args, a)
	}
	args = append(args, strconv.Itoa(len(turns)), op.Turn)
	return guardedScript(op.Script, op.State), keys, args
}

// uniqueSorted is keys sorted, without repeats: the keys a turn is taken
// on.
func uniqueSorted(keys []string) []string { return quorum.TurnKeys(keys) }
