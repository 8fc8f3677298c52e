// Package passthrough forwards the commands that are not lock operations to
// a data Redis and relays its replies unchanged, so that an application can
// point its only Redis address at lockproxy.
//
// It owns the routing decision (lock service or data Redis, by command and
// by the lock_keys patterns), the upstream connections to the data Redis and
// the byte-exact relay of one RESP2/RESP3 reply, or of everything a
// subscribed (or MONITOR) connection sends, and the return of an element a
// blocking pop took for a client that left. It must not interpret a
// forwarded reply beyond that, and it must not touch the lock engine: a lock operation is
// left to the command table (commands/) by returning false from Route.
//
// It is its own package rather than part of upstream/, which holds the lock
// backends the engine calls; passthrough sits beside commands/, called by
// resp/ for each command, and talks to a Redis that holds no locks.
package passthrough
