package passthrough

import (
	"bytes"
	"strconv"

	"github.com/lockproxy/lockproxy/pubsub"
)

// local are the commands lockproxy always answers itself: the handshake and
// connection commands, and the native lock commands.
var local = set("hello", "auth", "ping", "echo", "readonly", "quit", "reset", "client", "command", "info",
	"lock", "unlock", "renew", "lockinfo", "script")

// lockCapable are the commands the lock service serves on a lock key.
var lockCapable = set("set", "setnx", "get", "exists", "ttl", "pttl", "expire", "pexpire",
	"del", "unlink", "delex", "delifeq", "eval", "evalsha")

// keyless are forwarded commands whose first argument is not a key.
var keyless = set("keys", "scan", "config", "publish", "subscribe", "psubscribe", "unsubscribe", "punsubscribe",
	"dbsize", "flushall", "flushdb", "multi", "exec", "discard", "unwatch", "select", "swapdb", "time", "wait",
	"function", "object", "memory", "debug", "lastsave", "save", "bgsave", "bgrewriteaof", "role", "slowlog",
	"latency", "acl", "cluster", "pubsub", "randomkey", "xread", "xreadgroup", "ssubscribe", "sunsubscribe", "spublish", "monitor")

// allKeys are commands whose arguments are all keys.
var allKeys = set("mget", "del", "unlink", "exists", "touch", "watch", "sinter", "sunion", "sdiff",
	"sinterstore", "sunionstore", "sdiffstore", "pfcount", "pfmerge")

// unrelayed are commands after which the data Redis sends a replication
// stream, which lockproxy does not relay: they are refused.
var unrelayed = set("sync", "psync")

// stateful are commands that leave state on their upstream connection: a
// client sending one gets a connection of its own from then on.
var stateful = set("multi", "exec", "discard", "watch", "unwatch", "select", "swapdb", "client", "hello",
	"readonly", "readwrite", "asking", "reset", "auth")

// blocking are commands that wait on the data Redis without a time bound.
var blocking = set("blpop", "brpop", "brpoplpush", "blmove", "blmpop", "bzpopmin", "bzpopmax", "bzmpop",
	"xread", "xreadgroup", "wait", "waitaof")

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// keysOf are the keys a command names (name in lower case).
func keysOf(name string, args [][]byte) [][]byte {
	switch {
	case len(args) < 2 || keyless[name]:
		return nil
	case allKeys[name]:
		return args[1:]
	case name == "mset" || name == "msetnx":
		return every(args[1:], 2)
	case name == "eval" || name == "evalsha" || name == "eval_ro" || name == "evalsha_ro" || name == "fcall" || name == "fcall_ro":
		return scriptKeys(args)
	case name == "blpop" || name == "brpop" || name == "bzpopmin" || name == "bzpopmax":
		return args[1 : len(args)-1]
	case name == "rename" || name == "renamenx" || name == "copy" || name == "smove" || name == "rpoplpush" ||
		name == "lmove" || name == "blmove" || name == "brpoplpush":
		return args[1:min(3, len(args))]
	}
	return args[1:2]
}

func every(args [][]byte, step int) [][]byte {
	var out [][]byte
	for i := 0; i < len(args); i += step {
		out = append(out, args[i])
	}
	return out
}

// scriptKeys are EVAL's keys: numkeys of them after the script.
func scriptKeys(args [][]byte) [][]byte {
	if len(args) < 3 {
		return nil
	}
	n, err := strconv.Atoi(string(args[2]))
	if err != nil || n < 0 || n > len(args)-3 {
		return nil // the lock service or the data Redis reports the bad count
	}
	return args[3 : 3+n]
}

// matcher says which keys are lock keys: those that match one of its
// patterns as Redis's KEYS would (pubsub.Match).
type matcher []string

func (m matcher) isLock(key []byte) bool {
	for _, p := range m {
		if pubsub.Match(p, string(key)) {
			return true
		}
	}
	return false
}

// hasNX reports whether SET's options include NX.
func hasNX(args [][]byte) bool {
	for _, a := range args[3:] {
		if bytes.EqualFold(a, []byte("nx")) {
			return true
		}
	}
	return false
}
