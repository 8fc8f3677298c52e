package upstream

import "strings"

// The layout of locks on a node. A lock on key is the key itself, a
// string holding the holder's token with the lease's TTL — what
// SET key token NX PX ttl leaves on one Redis — so that an operator with
// redis-cli, or a lock script run on the node, sees the application's
// key. lockproxy's bookkeeping lives beside it, under the prefix:
//
//	<prefix>meta:<key>           string: token, fence, mode, name, ttl,
//	                             attempt (the last acquire to take or
//	                             refresh the key), took ("1" if it took
//	                             it, "0" once an acquire refreshed or an
//	                             extend extended it), lined ("0" while
//	                             nobody took a place in line since the
//	                             hold's acquire found none: its release
//	                             need not look), each as its length, ':'
//	                             and its bytes (meta.lua's encode)
//	                             (the TTL of the lock key when written
//	                             plus a grace, quorum.Op.MetaFor: a
//	                             release deletes the key alone, and an
//	                             extension that finds the key free beside
//	                             a meta heals nothing there)
//	<prefix>line:<key>           waiting line (sorted set: waiter -> arrival, µs)
//	<prefix>line-deadline:<key>  waiter -> µs after which its place is gone
//	<prefix>undone:<attempt>     undo mark of an acquire attempt (short TTL)
//	<prefix>released:<key>       release mark: the node's clock (ms) when a
//	                             release found the key free or another's
//	                             (heal.lua; TTL: the longest lease)
//	<prefix>turn:<key>           the turn of a script on key (turn.go)
//	<prefix>layout               string: the node's fencing counter, one
//	                             for every key (layout 3; a hash in 2)
//	<prefix>vetted               the restart rule's vetted run id
//	<prefix>vetted-floor         the node's counter when its fence floor
//	                             was first raised for the run id it names,
//	                             and that run id: "<counter>:<run id>"
//	                             (floor.lua)
//	<prefix>fence-floor, <prefix>fence-max
//	                             hashes naming the layout (see below)
//
// Nothing per key outlives the key's lease, except an undo mark (the
// attempt's lease plus quorum.UndoGrace) and a place in line (while its
// waiter may come back): a node that served a million distinct keys holds
// five keys of lockproxy's once their leases are over.
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
// operator deletes them (README: upgrading).
//
// Layout 2 (lockproxy up to commit c0fcb0f) kept the counter as field
// fence of the hash <prefix>layout (with field version "2"), and each
// lock's meta as a hash written by HSET and PEXPIRE and read by HMGET.
// Layout 3 writes the meta as one string with one SET PX, and reads it
// with the lock key in one MGET: a cycle costs a node two commands fewer.
// The first script of layout 3 to need a node's counter where the layout
// key holds none (an INCR or GET of it fails with WRONGTYPE, or finds
// nothing) reads layout 2's counter from the hash, and layout 1's from
// fence-floor and fence-max where they are still strings, and replaces the
// hash by the string counter, at least every counter of layouts 1 and 2:
// layout 2's acquire (past its quiet path), commit, floor and heal scripts
// HGET or HINCRBY the layout key before they write, and its status read
// HGETs it, so an instance of layout 2 gets WRONGTYPE from a node of layout 3
// and grants nothing there, raises no counter, and never runs its own
// settle (which would rewrite the counter); its release, extend and
// inspect fail on the HMGET of a meta of layout 3 where they read one.
// One write escapes: layout 2's quiet acquire of a free key SETs the key
// before its HINCRBY fails. The key is then a foreign holder's for its TTL:
// not granted to layout 2 (its script failed), refused to layout 3 (no
// meta, no fence), as a redsync client's lock would be. Since a grant of
// layout 3 writes layout 3 on a majority, layout 2 can no longer win a
// majority of the same nodes. A meta hash of layout 2 beside a key still
// held is a meta of another type, which MGET reads as nil: a meta lost,
// as one that expired before its key (the hold's fence unknown, its
// attempt not recorded); the next SET of the meta replaces it (a release
// of the hold writes one that describes nobody). A layout-3 meta's lined ("0": the release need not look at
// the line) misses no waiter: on a node of layout 3 only layout 3's
// acquire takes places in line (layout 2's fails on the counter before),
// and it flags the holder's meta as it does; a line of layout 2 that
// outlives the migration was there when the hold's acquire looked (its
// quiet path runs only where no line exists); a heal, or a meta written
// again after it was lost, records lined as unknown. Layout 3 counts an
// acquire before it takes the key (and
// takes the count back where the key is not free), so that a later layout,
// which must give <prefix>layout a type other than string and hash (settle
// stops at any other type before it writes), stops layout 3's acquire
// before it writes anything.

// The string key is the truth for "held": token T holds key iff GET key is
// T. The meta describes the holder only while its token field is that
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

// metaKey is the string that describes key's holder (meta.lua's encode).
func (n *RedisNode) metaKey(key string) string { return n.prefix + "meta:" + key }

// vettedFloorKey is the node's counter when its fence floor was first
// raised for a process, with that run id (floor.lua). Under "vetted",
// a reserved name already: a client's key maps where it always did.
func (n *RedisNode) vettedFloorKey() string { return n.prefix + "vetted-floor" }

// layoutKey is the node's fencing counter; its type names the layout.
func (n *RedisNode) layoutKey() string { return n.prefix + "layout" }

// lineKeys are key's waiting line and its deadlines on the node.
func (n *RedisNode) lineKeys(key string) (line, deadlines string) {
	return n.prefix + "line:" + key, n.prefix + "line-deadline:" + key
}

// undoKey is the undo mark of an acquire attempt.
func (n *RedisNode) undoKey(attempt string) string { return n.prefix + "undone:" + attempt }

// releasedKey is key's release mark (release.lua, heal.lua).
func (n *RedisNode) releasedKey(key string) string { return n.prefix + "released:" + key }

// releasedKeys are keys' release marks, in order.
func (n *RedisNode) releasedKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = n.releasedKey(k)
	}
	return out
}

// healCounters are the keys a heal raises the node's fencing counter
// with (layout.lua's raise): the layout key, and layout 1's fence-floor
// and fence-max, read where the node has no counter yet.
func (n *RedisNode) healCounters() []string {
	return []string{n.layoutKey(), n.prefix + "fence-floor", n.prefix + "fence-max"}
}
