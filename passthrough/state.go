package passthrough

import (
	"bytes"
	"strconv"
	"strings"
)

// A client's own upstream connection holds state the data Redis keeps per
// connection: a transaction (MULTI), watched keys (WATCH), the selected
// database (SELECT) and client settings (CLIENT TRACKING, NO-TOUCH,
// CACHING). When that connection breaks — the data Redis restarted, closed
// it for idling, or CLIENT KILL — the state is gone, and commands that
// relied on it would run without it (an EXEC after a lost WATCH applies a
// lost update). Redis closes such a client; lockproxy closes it too
// (Router.fail), so that the client reconnects knowing it has no state.

// note records the state a forwarded command left on st's connection,
// given its reply.
func (st *client) note(name string, args [][]byte, reply []byte) {
	ok := bytes.HasPrefix(reply, []byte("+OK"))
	queued := bytes.HasPrefix(reply, []byte("+QUEUED"))
	switch {
	case name == "watch" && ok:
		st.watching = true
	case name == "unwatch", name == "exec", name == "discard":
		st.watching = false // EXEC and DISCARD unwatch every key, whatever their reply
	case name == "select" && (ok || queued) && len(args) == 2: // queued: EXEC selects it
		if db, err := strconv.Atoi(string(args[1])); err == nil {
			st.db = db
		}
	case name == "client" && ok && len(args) > 2 && clientSettings[strings.ToLower(string(args[1]))]:
		st.settings = true
	}
}

// clientSettings are the CLIENT subcommands forwarded to the client's own
// connection that leave a setting there.
var clientSettings = set("tracking", "no-touch", "caching")

// lost names the state on st's connection that a break would lose, given
// the database new connections select; "" when there is none.
func (st *client) lost(defaultDB int) string {
	var what []string
	if st.multi {
		what = append(what, "transaction (MULTI)")
	}
	if st.watching {
		what = append(what, "WATCH")
	}
	if st.db != defaultDB {
		what = append(what, "database (SELECT "+strconv.Itoa(st.db)+")")
	}
	if st.settings {
		what = append(what, "CLIENT settings")
	}
	return strings.Join(what, ", ")
}
