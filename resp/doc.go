// Package resp is lockproxy's RESP server: it accepts connections and runs
// each one's loop (server.go; redcon parses the commands, wire.go reads
// them in batches into buffers a connection borrows only while it
// receives, and writes each batch's replies at once), enforces the
// per-client limits (Guard), frames replies in
// RESP2 or RESP3 (redcon writes only RESP2, so RESP3 maps and nulls are
// framed here), dispatches commands through one Table, and answers the
// connection handshake that clients send (HELLO, AUTH, PING, ECHO, SELECT,
// CLIENT, COMMAND, INFO, READONLY, QUIT, RESET), and transactions: MULTI
// queues copies of the commands that follow and EXEC runs them, asking a
// TxWatcher (commands/'s WATCH) first (multi.go). COMMAND answers from each
// command's Redis 7 entry (commandinfo.go; Redis's own entries in
// redis_commands.json, taken from a real redis-server). A handler that blocks
// (LOCK ... WAIT) watches its connection with WatchClose, so that a client
// that disconnects or sends QUIT stops waiting at once. Push sends a RESP3
// push from any goroutine, between two replies, never inside one.
//
// It also keeps the doors as Redis does: protected mode (no password: only
// loopback clients), HTTP requests closed at their first line (POST,
// Host:), optional TLS on the listener, ACL-style users (AUTH user pass,
// NOPERM), limits before AUTH and an auth timeout, an idle timeout, a byte
// budget shared by all connections (limits that SetLimits changes while
// serving: each connection reads them at its next command), CLIENT KILL,
// and log lines about refused connections bounded in number. A Route hook,
// when set, takes the commands that go to a data Redis (passthrough/)
// before the Table; a handler may make its connection stream (Conn.Stream),
// served by a goroutine of its own so that other goroutines can write to
// the client between replies (a relayed pub/sub subscription), or hand its
// replies to another goroutine through its Sink (sink.go): passthrough's
// reader of a shared upstream connection writes each forwarded reply to
// its client as it reads it, in the order the connection announced them.
//
// It knows nothing of locks: commands/ registers the lock commands in the
// Table and learns of connections opening, resetting and closing through
// the Session interface.
package resp
