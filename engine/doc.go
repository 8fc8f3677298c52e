// Package engine is the lock engine: it owns the locks this lockproxy instance
// grants, the per-connection owners of connection-bound locks and their
// watchdog renewal, and the accounting of locks it learns were lost.
//
// It talks to the store through the small Backend interface (Redlock over
// Redis nodes, later ZooKeeper) and knows nothing of RESP: commands/ parses
// requests and calls the engine; the engine never writes to a client.
package engine
