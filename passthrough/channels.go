package passthrough

import "github.com/lockproxy/lockproxy/resp"

// Channels with a data Redis. Lock libraries wait for unlock messages that
// their lock scripts publish (Redisson on redisson_lock__channel:{name},
// Spring on <registry>-channel). Those scripts run on the lock nodes, so a
// waiter must subscribe there, not on the data Redis. With lock_keys, a
// channel that matches a lock pattern is a lock channel: SUBSCRIBE,
// UNSUBSCRIBE and PUBLISH of lock channels are served by the lock service
// (its pub/sub through the nodes), those of other channels are relayed to
// the data Redis, and one command naming both kinds is refused. Patterns
// (PSUBSCRIBE) always go to the data Redis. Without lock_keys every channel
// is the data Redis's, as before. One connection subscribes on one side
// only: the other side's SUBSCRIBE is refused while it has subscriptions.

// channelCommands are the commands whose arguments after the name are
// channels (PUBLISH: the first only).
var channelCommands = set("subscribe", "unsubscribe", "publish")

// classifyChannels routes a channel command; ok is false for any other
// command, and without lock_keys.
func (r *Router) classifyChannels(c *resp.Conn, name string, args [][]byte) (d destination, ok bool) {
	if !channelCommands[name] || len(r.locks) == 0 {
		return 0, false
	}
	channels := args[1:]
	if name == "publish" {
		channels = args[1:min(2, len(args))]
	}
	if len(channels) == 0 { // UNSUBSCRIBE from all: the side it subscribed on
		if c != nil && c.Subscriptions() > 0 {
			return toLocks, true
		}
		return toData, true
	}
	n := 0
	for _, ch := range channels {
		if r.locks.isLock(ch) {
			n++
		}
	}
	switch {
	case n == 0:
		return toData, true
	case n == len(channels):
		return toLocks, true
	}
	return mixed, true
}

// otherSide is the error for a SUBSCRIBE on one side by a connection
// subscribed on the other; "" when there is none.
func (r *Router) otherSide(c *resp.Conn, st *client, name string, dest destination) string {
	switch {
	case name != "subscribe" && name != "psubscribe":
		return ""
	case dest == toLocks && st.sub != nil:
		return "ERR lockproxy: this connection is subscribed on the data Redis; subscribe to lock channels on another connection"
	case dest == toData && c.Subscriptions() > 0:
		return "ERR lockproxy: this connection is subscribed to lock channels; subscribe to data channels on another connection"
	}
	return ""
}
