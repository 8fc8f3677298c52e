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
//	<prefix>line:<key>           waiting line (sorted set: waiter -> arrival, µs)
//	<prefix>line-deadline:<key>  waiter -> µs after which its place is gone
//	<prefix>undone:<attempt>     undo mark of an acquire attempt (short TTL)
//	<prefix>released:<key>       release mark: the node's clock (ms) when a
//	                             release found the key free or another's
//	                             (heal.lua; TTL: the longest lease)
//	<prefix>turn:<key>           the turn of a script on key (turn.go)
//	<prefix>layout               hash: version ("2"), fence (the node's
//	                             fencing counter, one for every key)
//	<prefix>vetted               the restart rule's vetted run id
//	<prefix>fence-floor, <prefix>fence-max
//	                             hashes naming layout 2 (see below)
//
// Nothing per key outlives the key's lease, except an undo mark (the
// attempt's lease plus quorum.UndoGrace) and a place in line (while its
// waiter may come back): a node that served a million distinct keys holds
// four keys of lockproxy's once their leases are over.
//
// One fencing counter per node, not per key (etcd's revision is one
// number for the whole store, too). Fences stay strictly increasing per
// key: an acquire takes the node's counter plus one, a commit raises the
// counter to at least the grant's fence, and the restart rule raises a
// rejoining node's counter above every other's (floor.lua). Whatever held
// for a key's own counter holds for the node's: it is never below any
// fence the key's counter would have reached on that node, since it
// grows with every grant and commit of every key. Fences of one key are no
// longer consecutive (other keys' grants come between); nothing promises
// that they were.
//
// Layout 1 (lockproxy up to commit 3cbe2b7) kept a counter per key,
// <prefix>fence:<key>, for ever, and the node-wide strings fence-floor
// (no counter counted below it) and fence-max (at least every counter).
// The first script of layout 2 to need a node's counter where the node has
// none (layout.lua) starts it at max(fence-floor, fence-max), at least
// every counter of layout 1, and replaces those two strings by hashes:
// layout 1's acquire, commit and floor scripts, and its status read, begin
// with GET of one of them, so an instance of layout 1 gets WRONGTYPE from a
// node of layout 2 and takes nothing there; since a grant of layout 2
// writes layout 2 on a majority, layout 1 can no longer win a majority of
// the same nodes. The per-key counters of layout 1 stay, unused, until an
// operator deletes them (README: upgrading). A later layout replaces
// <prefix>layout by another type, so that this one's HINCRBY fails too.

// The string key is the truth for "held": token T holds key iff GET key is
// T. The meta hash describes the holder only while its token field is that
// value; a key of another type (a client library's lock hash written by a
// script) is held by somebody whose token lockproxy does not know.
//
// A client's key that would land on bookkeeping (say
// "lockproxy:layout", which would overwrite the node's fencing counter) is
// moved under <prefix>key:, which is reserved too, so the mapping stays
// one to one.

// reserved are the names under the prefix that lockproxy writes itself.
// Layout 1's names stay reserved, so that a key maps where it always did.
var reserved = []string{"meta:", "fence:", "line:", "line-deadline:", "undone:", "released:", "key:", "turn:", "fence-floor", "fence-max", "vetted", "layout"}

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

// layoutKey is the hash of the node's layout and fencing counter.
func (n *RedisNode) layoutKey() string { return n.prefix + "layout" }

// lineKeys are key's waiting line and its deadlines on the node.
func (n *RedisNode) lineKeys(key string) (line, deadlines string) {
	return n.prefix + "line:" + key, n.prefix + "line-deadline:" + key
}

// undoKey is the undo mark of an acquire attempt.
func (n *RedisNode) undoKey(attempt string) string { return n.prefix + "undone:" + attempt }

// releasedKey is key's release mark (release.lua, heal.lua).
func (n *RedisNode) releasedKey(key string) string { return n.prefix + "released:" + key }

// healCounters are the keys a heal raises the node's fencing counter
// with (layout.lua's raise): the layout hash, and layout 1's fence-floor
// and fence-max, read where the node has no counter yet.
func (n *RedisNode) healCounters() []string {
	return []string{n.layoutKey(), n.prefix + "fence-floor", n.prefix + "fence-max"}
}
