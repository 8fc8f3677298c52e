// Package upstream holds lockproxy's Redis side: quorum.Node over one Redis
// node (Lua scripts in batches on a connection of its own), release notifications
// from the nodes, and the embedded development mode on in-process
// miniredis servers. The ZooKeeper backend is its own package,
// upstream/zookeeper.
//
// It owns the wire: key layout on the nodes (keys.go: a lock key is the
// client's key holding the token, as SET NX PX leaves it on one Redis, with
// lockproxy's bookkeeping in <prefix>-prefixed keys beside it), the Lua
// scripts, EVALSHA with its NOSCRIPT fallback (the calls of lockproxy's
// own scripts a batch has in a row go as one call of ops.lua, which runs
// each under pcall: scripts.go's opsScript), each node's connection
// (conn.go: batches written by whoever has one ready, replies read by one
// reader in RESP2, wire.go; go-redis only for status reads, surveys and
// the blocking list commands), each node's wall clock read with every batch (clock.go:
// one TIME at its end; a jump answers that batch's calls with
// quorum.ErrClockJumped), the conversion of node replies into quorum types, and release
// notifications (release.lua publishes the released key on
// "<prefix>released"; Subscribe receives them and hands them to the
// engine's Events.Released). Notifications are a hint
// to wake waiters sooner: they can be lost, and expiries send none. The
// per-node pub/sub connection that receives them also carries the channels and patterns clients
// subscribe through lockproxy (Subscription.Join, Leave, Publish); their
// shard channels go on a second connection, dialled on the first
// JoinShard (LeaveShard, SPublish), and
// ListNode runs the list commands of lock scripts' signal lists, BLPOP on
// connections of its own.
//
// It must not decide anything about locks: no quorum counting, no retries,
// no validity or fencing arithmetic (quorum/ does that). It knows nothing of
// RESP clients or configuration files. Every call honours its context.
package upstream
