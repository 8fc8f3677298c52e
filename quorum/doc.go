// Package quorum is the Redlock algorithm as pure logic over a small Node
// interface: parallel fan-out with a per-node timeout, a majority quorum,
// validity = ttl - elapsed - drift, rollback on every node after a failed
// attempt, and fencing tokens that strictly increase per key. It enforces
// Redlock's restart rule (restart.go): a node that restarted without
// verified fsync is not counted until every lease it may have held has
// expired and its fencing counters have been raised; a node whose wall
// clock jumped (its answers say so: ErrClockJumped) is held out the same
// way, and the holders of locks it vouched for are told (clock.go). Eval
// (eval.go) runs a script outside the catalog on every node and keeps the
// majority's reply; repair.go gives a node whose state of the script's keys
// differs from a majority's that state.
//
// It does no I/O of its own: upstream/ implements Node over real Redis
// nodes, and tests implement it with fault-injecting fakes. It must not know
// about RESP, connections or configuration files.
package quorum
