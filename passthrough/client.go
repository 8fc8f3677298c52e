package passthrough

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/resp"
)

// Which connection answers each CLIENT subcommand when a data Redis is
// configured:
//
//   - ID, GETNAME, SETNAME, SETINFO, INFO, LIST, KILL, NO-EVICT, HELP:
//     lockproxy, about the client's connection to lockproxy. Its ids are
//     lockproxy's, its name is the one LOCKINFO shows.
//   - TRACKING, CACHING, TRACKINGINFO, GETREDIR, NO-TOUCH: the data Redis,
//     on the client's own connection, since they concern the keys the
//     client reads there. In RESP3, TRACKING ON makes that connection a
//     relay, so that invalidation pushes reach the client as they come. A
//     REDIRECT id is a lockproxy client id (what CLIENT ID told the
//     client), translated to the data Redis's id of that client's own
//     connection, which exists once that client subscribed through
//     lockproxy; GETREDIR translates back.
//   - UNBLOCK: the id is lockproxy's; a client blocked in a forwarded
//     command (BLPOP, …) is unblocked on the data Redis. A client waiting
//     in LOCK … WAIT is not unblocked (0).
//   - REPLY: lockproxy, which owns what the client reads; forwarded
//     commands' replies are written or dropped as it said when each came
//     (Router.queue). Not on a relayed connection, whose upstream replies
//     lockproxy does not tell apart from messages.
//   - PAUSE, UNPAUSE: the data Redis, for all its clients; lock commands
//     are not paused.
var (
	clientOwn    = set("tracking", "caching", "trackinginfo", "getredir", "no-touch")
	clientServer = set("pause", "unpause", "unblock")
)

// isClientReply reports whether CLIENT args is CLIENT REPLY.
func isClientReply(args [][]byte) bool {
	return len(args) > 1 && strings.EqualFold(string(args[1]), "reply")
}

// clientDest is where CLIENT args goes.
func clientDest(args [][]byte) destination {
	if len(args) < 2 {
		return toLocks
	}
	sub := strings.ToLower(string(args[1]))
	if clientOwn[sub] || clientServer[sub] {
		return toData
	}
	return toLocks
}

// client handles a CLIENT subcommand for the data Redis, outside relay
// mode; earlier replies were flushed.
func (r *Router) clientCmd(c *resp.Conn, st *client, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	switch sub {
	case "pause", "unpause":
		r.queue(c, st, args)
		r.flush(c, st)
	case "unblock":
		r.unblockClient(c, st, args)
	case "tracking":
		args, ok := r.redirect(c, args)
		if !ok {
			return
		}
		if c.Proto() == 3 && len(args) > 2 && strings.EqualFold(string(args[2]), "on") {
			if st.multi {
				st.dirty = true
				c.Error("ERR lockproxy does not relay 'client tracking' in RESP3 inside a transaction")
				return
			}
			r.enterRelay(c, st, "client", args)
			return
		}
		r.forward(c, st, "client", args)
	case "getredir":
		r.getRedir(c, st, args)
	default:
		r.forward(c, st, "client", args)
	}
}

// relayedClient translates a CLIENT subcommand's client ids for a client in
// relay mode; false when it was refused.
func (r *Router) relayedClient(c *resp.Conn, args [][]byte) ([][]byte, bool) {
	switch strings.ToLower(string(args[1])) {
	case "tracking":
		return r.redirect(c, args)
	case "unblock":
		if len(args) < 3 {
			return args, true
		}
		id, err := strconv.ParseUint(string(args[2]), 10, 64)
		if err != nil {
			c.Error("ERR value is not an integer or out of range")
			return nil, false
		}
		out := append([][]byte(nil), args...)
		out[2] = strconv.AppendInt(nil, r.upstreamID(id), 10) // 0: unknown, as Redis answers
		return out, true
	}
	return args, true
}

// redirect replaces the lockproxy client id after TRACKING's REDIRECT with
// the data Redis's id of that client's connection.
func (r *Router) redirect(c *resp.Conn, args [][]byte) ([][]byte, bool) {
	for i := 3; i+1 < len(args); i++ {
		if !strings.EqualFold(string(args[i]), "redirect") {
			continue
		}
		id, err := strconv.ParseUint(string(args[i+1]), 10, 64)
		up := int64(0)
		if err == nil {
			up = r.upstreamID(id)
		}
		if up == 0 {
			c.Error("ERR The client ID you want redirect to does not exist")
			return nil, false
		}
		out := append([][]byte(nil), args...)
		out[i+1] = strconv.AppendInt(nil, up, 10)
		return out, true
	}
	return args, true
}

// getRedir is GETREDIR, its data Redis id translated back to lockproxy's.
func (r *Router) getRedir(c *resp.Conn, st *client, args [][]byte) {
	reply, ok := r.send(c, st, "client", args, true)
	if !ok {
		c.Error("ERR data Redis " + r.cfg.Addr + " unavailable")
		return
	}
	if len(reply) > 1 && reply[0] == ':' {
		if up, err := strconv.ParseInt(string(trimCRLF(reply[1:])), 10, 64); err == nil && up > 0 {
			if id := r.lockproxyID(up); id != 0 {
				c.Int(int64(id))
				return
			}
		}
	}
	c.Raw(bytes.Clone(reply))
}

// unblockClient is UNBLOCK id [TIMEOUT|ERROR] for lockproxy's client id.
func (r *Router) unblockClient(c *resp.Conn, st *client, args [][]byte) {
	if len(args) < 3 || len(args) > 4 {
		c.Error("ERR unknown subcommand or wrong number of arguments for 'unblock'. Try CLIENT HELP.")
		return
	}
	id, err := strconv.ParseUint(string(args[2]), 10, 64)
	if err != nil {
		c.Error("ERR value is not an integer or out of range")
		return
	}
	if len(args) == 4 && !strings.EqualFold(string(args[3]), "timeout") && !strings.EqualFold(string(args[3]), "error") {
		c.Error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
		return
	}
	up := r.upstreamID(id)
	if up == 0 {
		c.Int(0)
		return
	}
	out := append([][]byte(nil), args...)
	out[2] = strconv.AppendInt(nil, up, 10)
	r.queue(c, st, out)
	r.flush(c, st)
}

// upstreamID is the data Redis's id of lockproxy client id's own
// connection, 0 when it has none or it was never asked.
func (r *Router) upstreamID(id uint64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.clients[id]
	if st == nil || st.up == nil {
		return 0
	}
	return st.up.id.Load()
}

// lockproxyID is the lockproxy client whose own connection has data Redis
// id up, 0 if none.
func (r *Router) lockproxyID(up int64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, st := range r.clients {
		if st.up != nil && st.up.id.Load() == up {
			return id
		}
	}
	return 0
}
