// Package upstream holds lockproxy's real backends: quorum.Node over one
// Redis node (go-redis, Lua scripts, batched pipelines), the embedded
// development mode on in-process miniredis servers, and the ZooKeeper
// backend (an engine.Backend of its own: ZooKeeper's lock recipe, with
// leases enforced here; see ZooKeeper).
//
// It owns the wire: key layout on the nodes, the Lua scripts, EVALSHA with
// its NOSCRIPT fallback, connection pools and pipelining, the conversion
// of node replies into quorum types, and release notifications (release.lua
// publishes the released key on "<prefix>released"; Subscribe receives them).
// Notifications are a hint to wake waiters sooner: they can be lost, and
// expiries send none.
//
// For Redis nodes it must not decide anything about locks: no quorum
// counting, no retries, no validity or fencing arithmetic (quorum/ does
// that). The ZooKeeper backend is whole on its own, as the ensemble is one
// consistent store. It knows nothing
// of RESP clients or configuration files. Every call honours its context.
package upstream
