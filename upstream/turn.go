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

	turnScript     = newScript("turn", turnLua)
	turnBackScript = newScript("turnback", turnBackLua)
)

func init() { scripts = append(scripts, turnScript, turnBackScript) }

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
func Guard(src string) string {
	var b strings.Builder
	body := src
	if strings.HasPrefix(src, "#!") {
		line, rest, _ := strings.Cut(src, "\n")
		b.WriteString(line + "\n")
		body = rest
	}
	b.WriteString(`local __lp_tok = table.remove(ARGV) local __lp_n = tonumber(table.remove(ARGV)) ` +
		`for __lp_i = 1, __lp_n do if redis.call('GET', table.remove(KEYS)) ~= __lp_tok then ` +
		`return redis.error_reply('` + turnRefused + `' .. __lp_tok .. ' the turn on the script\'s keys is not this script\'s on this node') end end ` +
		`local function __lp_body(...) `)
	b.WriteString(body)
	b.WriteString("\nend return __lp_body()")
	return b.String()
}

// guardedScript is s guarded by its turn, made once per admitted script
// and kept in its Memo: a map here would keep every script clients ever
// sent (scripts that inline their values are all different), where the
// Memo goes when the script cache drops the script.
func guardedScript(s *luascript.Admitted) *script {
	if g, ok := s.Memo.Load().(*script); ok {
		return g
	}
	g := newScript("script "+s.SHA+" (guarded by its turn)", Guard(string(s.Src)))
	s.Memo.Store(g)
	return g
}

// turnFor is the script and arguments of an OpTurn, an OpTurnBack, or an
// OpEval guarded by its turn.
func (n *RedisNode) turnFor(op *quorum.Op) (*script, []string, []any) {
	switch op.Kind {
	case quorum.OpTurn:
		return turnScript, n.turnKeys(op.Keys), []any{op.Token, millis(op.TTL)}
	case quorum.OpTurnBack:
		return turnBackScript, n.turnKeys(op.Keys), []any{op.Token}
	}
	keys := append(append(make([]string, 0, 2*len(op.Keys)), op.Keys...), n.turnKeys(uniqueSorted(op.Keys))...)
	args := make([]any, 0, len(op.Args)+2)
	for _, a := range op.Args {
		args = append(args, a)
	}
	args = append(args, strconv.Itoa(len(keys)-len(op.Keys)), op.Turn)
	return guardedScript(op.Script), keys, args
}

// uniqueSorted is keys sorted, without repeats: the keys a turn is taken
// on.
func uniqueSorted(keys []string) []string { return quorum.TurnKeys(keys) }
