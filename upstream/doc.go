// Package upstream holds lockproxy's Redis side: quorum.Node over one Redis
// node (go-redis, Lua scripts, batched pipelines), release notifications
// from the nodes, and the embedded development mode on in-process
// miniredis servers. The ZooKeeper backend is its own package,
// upstream/zookeeper.
//
// It owns the wire: key layout on the nodes (keys.go: a lock key is the
// client's key holding the token, as SET NX PX leaves it on one Redis, with
// lockproxy's bookkeeping in <prefix>-prefixed keys beside it), the Lua
// scripts, EVALSHA with its NOSCRIPT fallback, connection pools and
// pipelining, each node's wall clock read with every pipeline (clock.go:
// one TIME at its end; a jump answers that pipeline's calls with
// quorum.ErrClockJumped), the conversion of node replies into quorum types, and release
// notifications (release.lua publishes the released key on
// "<prefix>released"; Subscribe receives them and hands them to the
// engine's Events.Released). Notifications are a hint
// to wake waiters sooner: they can be lost, and expiries send none. The
// same per-node connection carries the channels and patterns clients
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
