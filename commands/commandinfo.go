package commands

import "github.com/lockproxy/lockproxy/resp"

// The COMMAND INFO entries of lockproxy's own commands, in Redis 7's
// shape; the Redis commands get Redis's (resp/redis_commands.json). The
// key is always the first argument, so clients that route by key
// (go-redis's cluster and ring clients) find it.

func lockDoc(summary string) resp.Doc {
	return resp.Doc{Summary: summary, Since: "1.0.0", Group: "lockproxy", Complexity: "O(1)"}
}

var (
	lockInfo = &resp.CommandInfo{Arity: -2, Flags: []string{"write", "denyoom", "blocking"}, First: 1, Last: 1, Step: 1,
		ACL: []string{"@write", "@slow", "@blocking"}, KeySpecs: resp.FirstKeySpec("RW", "INSERT"),
		Doc: lockDoc("Takes an exclusive lock on the key: token, fencing token and validity, or null. WAIT blocks for it.")}
	unlockInfo = &resp.CommandInfo{Arity: 3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1,
		ACL: []string{"@write", "@fast"}, KeySpecs: resp.FirstKeySpec("RW", "ACCESS", "DELETE"),
		Doc: lockDoc("Releases the lock on the key if the token holds it.")}
	renewInfo = &resp.CommandInfo{Arity: -3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1,
		ACL: []string{"@write", "@fast"}, KeySpecs: resp.FirstKeySpec("RW", "ACCESS", "UPDATE"),
		Doc: lockDoc("Extends the lease of the lock the token holds: the new validity in milliseconds, or null.")}
	lockinfoInfo = &resp.CommandInfo{Arity: 2, Flags: []string{"readonly", "fast"}, First: 1, Last: 1, Step: 1,
		ACL: []string{"@read", "@fast"}, KeySpecs: resp.FirstKeySpec("RO", "ACCESS"),
		Doc: lockDoc("Who holds the lock on the key and how, never its token.")}
	lockproxyInfo = &resp.CommandInfo{Arity: -2, Flags: []string{"loading", "stale"},
		ACL: []string{"@slow"}, Doc: resp.Doc{Summary: "Lists the locks and waiters of this instance (LOCKS, WAITERS, HELP).", Since: "1.0.0", Group: "lockproxy", Complexity: "O(N)"}}
)
