// Package lists serves the list commands lock libraries use as signals —
// BLPOP, BRPOP, LPOP, RPOP, LPUSH, RPUSH, LLEN — over the redlock (or
// embedded) nodes, where a lock script run on every node pushes its
// signal. Writes go to every node; a blocking pop returns as soon as one
// node has an element, then removes that element from the other nodes.
// Keys are used on the nodes as the client stores them (resp/'s database
// prefix included, nothing else), as a script run unchanged on the nodes
// would name them.
//
// It owns the fan-out and the replies; upstream.ListNode owns the wire. It
// knows nothing of locks.
package lists
