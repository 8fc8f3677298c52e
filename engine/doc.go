// Package engine is the lock engine: it owns the locks this lockproxy instance
// grants, the per-connection owners of connection-bound locks and their
// watchdog renewal, the waiting line in this instance, the accounting of
// locks it learns were lost or taken (each holder is told through its
// Owner's OnLost, and hears LostError once), lock-delay on disconnect, and
// the listing of the locks it granted and its waiters (LOCKPROXY LOCKS,
// WAITERS), which never shows a token. All it knows of one key (the lock
// granted here, bound or lease; losses not yet reported; waiters; the last
// release) is one record that every reader uses (held.go). It declares the
// domain errors that reach clients (commands/errors.go words them).
//
// It talks to the store through the small Backend interface (Redlock over
// Redis nodes in quorum/, ZooKeeper in upstream/zookeeper), and a backend
// talks back through one interface, Events, which the engine hands it when
// it is built (New). It knows nothing of RESP: commands/ parses requests and
// calls the engine; the engine never writes to a client (OnLost is a
// callback commands/ turns into a push).
package engine
