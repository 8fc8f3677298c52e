package upstream

import "strings"

// The layout of locks on a node. A lock on key is the key itself, a
// string holding the holder's token with the lease's TTL — what
// SET key token NX PX ttl leaves on one Redis — so that an operator with
// redis-cli, or a lock script run on the node, sees the application's
// key. lockproxy's bookkeeping lives beside it, under the prefix:
//
//	<prefix>meta:<key>           hash: token, fence, mode, name, ttl, attempt
//	                             (the last acquire to take or refresh the
//	                             key), took ("1" if it took it, "0" once
//	                             an acquire refreshed or an extend extended
//	                             it) (the TTL of the lock key when written)
//	<prefix>fence:<key>          the key's fencing counter, kept for ever
//	<prefix>line:<key>           waiting line (sorted set: waiter -> arrival, µs)
//	<prefix>line-deadline:<key>  waiter -> µs after which its place is gone
//	<prefix>undone:<attempt>     undo mark of an acquire attempt (short TTL)
//	<prefix>released:<key>       release mark: the node's clock (ms) when a
//	                             release found the key free or another's
//	                             (heal.lua; TTL: the longest lease)
//	<prefix>turn:<key>           the turn of a script on key (turn.go)
//	<prefix>fence-floor, <prefix>fence-max, <prefix>vetted
//	                             node-wide keys of the restart rule
//
// The string key is the truth for "held": token T holds key iff GET key is
// T. The meta hash describes the holder only while its token field is that
// value; a key of another type (a client library's lock hash written by a
// script) is held by somebody whose token lockproxy does not know.
//
// A client's key that would land on bookkeeping (say
// "lockproxy:fence:k", which would overwrite k's fencing counter) is
// moved under <prefix>key:, which is reserved too, so the mapping stays
// one to one.

// reserved are the names under the prefix that lockproxy writes itself.
var reserved = []string{"meta:", "fence:", "line:", "line-deadline:", "undone:", "released:", "key:", "turn:", "fence-floor", "fence-max", "vetted"}

// lockKey is the node key of key's lock: key itself, unless it falls in
// the node's bookkeeping.
func (n *RedisNode) lockKey(key string) string {
	rest, ok := strings.CutPrefix(key, n.prefix)
	if !ok {
		return key
	}
	for _, r := range reserved {
		if strings.HasPrefix(rest, r) {
			return n.prefix + "key:" + key
		}
	}
	return key
}

// metaKey is the hash that describes key's holder.
func (n *RedisNode) metaKey(key string) string { return n.prefix + "meta:" + key }

// fenceKey is key's fencing counter.
func (n *RedisNode) fenceKey(key string) string { return n.prefix + "fence:" + key }

// lineKeys are key's waiting line and its deadlines on the node.
func (n *RedisNode) lineKeys(key string) (line, deadlines string) {
	return n.prefix + "line:" + key, n.prefix + "line-deadline:" + key
}

// undoKey is the undo mark of an acquire attempt.
func (n *RedisNode) undoKey(attempt string) string { return n.prefix + "undone:" + attempt }

// releasedKey is key's release mark (release.lua, heal.lua).
func (n *RedisNode) releasedKey(key string) string { return n.prefix + "released:" + key }

// healCounters are the fencing counters a heal of key raises to the
// lock's fence: the key's counter and the node's largest.
func (n *RedisNode) healCounters(key string) []string {
	return []string{n.fenceKey(key), n.prefix + "fence-max"}
}
