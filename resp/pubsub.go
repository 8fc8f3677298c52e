package resp

import (
	"slices"
	"sort"
	"strings"

	"github.com/lockproxy/lockproxy/pubsub"
)

// Pub/sub without a data Redis: SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE,
// PUNSUBSCRIBE and PUBLISH, and the shard channels' SSUBSCRIBE, SUNSUBSCRIBE
// and SPUBLISH as Redis 7.0 serves them when it is not a cluster (a
// namespace of their own: SPUBLISH reaches SSUBSCRIBE subscribers only,
// PUBLISH never does, and confirmations count shard channels apart from
// channels and patterns), with Redis's replies in RESP2 and RESP3. The
// hub (pubsub/) carries them through the nodes on the redlock and embedded
// backends; a SUBSCRIBE the nodes could not confirm gets the hub's error
// instead of its confirmation, and leaves the connection as it was. A
// subscription's confirmation is an ordinary reply; messages are written by
// the connection's push writer (push.go), between replies. A client that
// does not read loses messages beyond maxPendingPushes (Redis would close
// it at its pub/sub output-buffer limit).

func (s *Server) pubsubCommands() []Command {
	return []Command{
		{Name: "subscribe", Arity: -2, Handler: s.subscribe},
		{Name: "psubscribe", Arity: -2, Handler: s.subscribe},
		{Name: "unsubscribe", Arity: -1, Handler: s.unsubscribe},
		{Name: "punsubscribe", Arity: -1, Handler: s.unsubscribe},
		{Name: "publish", Arity: 3, Handler: s.publish},
		{Name: "ssubscribe", Arity: -2, Handler: s.subscribe},
		{Name: "sunsubscribe", Arity: -1, Handler: s.unsubscribe},
		{Name: "spublish", Arity: 3, Handler: s.publish},
		{Name: "pubsub", Arity: -2, Handler: s.pubsubInfo},
	}
}

// kindOf is the kind of subscription a (un)subscribe or publish command names.
func kindOf(cmd []byte) pubsub.Kind {
	return commandKind[strings.ToLower(string(cmd))]
}

var commandKind = map[string]pubsub.Kind{
	"subscribe": pubsub.Channel, "unsubscribe": pubsub.Channel, "publish": pubsub.Channel,
	"psubscribe": pubsub.Pattern, "punsubscribe": pubsub.Pattern,
	"ssubscribe": pubsub.Shard, "sunsubscribe": pubsub.Shard, "spublish": pubsub.Shard,
}

// subscribedOK are the commands a RESP2 connection in subscribed mode may send.
var subscribedOK = map[string]bool{"subscribe": true, "psubscribe": true, "unsubscribe": true,
	"punsubscribe": true, "ping": true, "quit": true, "reset": true, "ssubscribe": true, "sunsubscribe": true}

// refusedSubscribed is Redis's error for a command a RESP2 connection in
// subscribed mode may not send; "" when it may.
func (c *Conn) refusedSubscribed(name string) string {
	if c.Proto() == 3 || c.subscriptions() == 0 || subscribedOK[name] {
		return ""
	}
	return "ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
}

// Subscriptions counts the channels, patterns and shard channels c
// subscribed through the lock service.
func (c *Conn) Subscriptions() int { return c.subscriptions() }

// subscriptions counts c's channels, patterns and shard channels: any
// puts a RESP2 connection in subscribed mode.
func (c *Conn) subscriptions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.subs[0]) + len(c.subs[1]) + len(c.subs[2])
}

// counted is the count a confirmation of kind carries, as Redis 7.0 counts:
// shard channels apart from channels and patterns; c.mu is held.
func (c *Conn) counted(kind pubsub.Kind) int {
	if kind == pubsub.Shard {
		return len(c.subs[pubsub.Shard])
	}
	return len(c.subs[pubsub.Channel]) + len(c.subs[pubsub.Pattern])
}

// subscribe is SUBSCRIBE channel ..., PSUBSCRIBE pattern ... and
// SSUBSCRIBE shardchannel ...: one confirmation per name, with c's count of
// subscriptions after it.
func (s *Server) subscribe(c *Conn, args [][]byte) {
	kind := kindOf(args[0])
	cmd := strings.ToLower(string(args[0]))
	for _, a := range args[1:] {
		if !c.mayChannel(string(a), kind) {
			c.Error(msgNoChannel) // as Redis: none of them is subscribed
			return
		}
	}
	for _, a := range args[1:] {
		name := string(a)
		c.mu.Lock()
		tab := c.subTable(kind)
		_, had := tab[name]
		tab[name] = struct{}{}
		n := c.counted(kind)
		c.mu.Unlock()
		if !had {
			if err := s.hub.Subscribe(c.Context(), c, name, kind); err != nil {
				c.mu.Lock()
				delete(tab, name)
				c.mu.Unlock()
				c.Error(err.Error())
				continue
			}
		}
		c.confirm(cmd, &name, n)
	}
}

// unsubscribe is UNSUBSCRIBE [channel ...], PUNSUBSCRIBE [pattern ...] and
// SUNSUBSCRIBE [shardchannel ...]: without names, from every one of the
// kind; with none to leave, one confirmation naming nothing.
func (s *Server) unsubscribe(c *Conn, args [][]byte) {
	kind := kindOf(args[0])
	cmd := strings.ToLower(string(args[0]))
	names := make([]string, 0, len(args)-1)
	for _, a := range args[1:] {
		names = append(names, string(a))
	}
	if len(names) == 0 {
		c.mu.Lock()
		for name := range c.subTable(kind) {
			names = append(names, name)
		}
		c.mu.Unlock()
		sort.Strings(names)
	}
	if len(names) == 0 {
		c.mu.Lock()
		n := c.counted(kind)
		c.mu.Unlock()
		c.confirm(cmd, nil, n)
		return
	}
	for _, name := range names {
		c.mu.Lock()
		tab := c.subTable(kind)
		_, had := tab[name]
		delete(tab, name)
		n := c.counted(kind)
		c.mu.Unlock()
		if had {
			s.hub.Unsubscribe(c, name, kind)
		}
		c.confirm(cmd, &name, n)
	}
}

// unsubscribeAll leaves every subscription of c (RESET, close).
func (s *Server) unsubscribeAll(c *Conn) {
	c.mu.Lock()
	subs := c.subs
	c.subs = [3]map[string]struct{}{}
	c.mu.Unlock()
	for i, tab := range subs {
		for name := range tab {
			s.hub.Unsubscribe(c, name, pubsub.Kind(i))
		}
	}
}

// publish is PUBLISH channel message and SPUBLISH shardchannel message:
// the number of receivers.
func (s *Server) publish(c *Conn, args [][]byte) {
	if !c.mayChannel(string(args[1]), pubsub.Channel) {
		c.Error(msgNoChannel)
		return
	}
	publish := s.hub.Publish
	if kindOf(args[0]) == pubsub.Shard {
		publish = s.hub.SPublish
	}
	n, err := publish(c.Context(), string(args[1]), args[2])
	if err != nil {
		c.Error(err.Error())
		return
	}
	c.Int(n)
}

// subTable is c's table of channels, patterns or shard channels; c.mu is held.
func (c *Conn) subTable(kind pubsub.Kind) map[string]struct{} {
	i := kind
	if c.subs[i] == nil {
		c.subs[i] = map[string]struct{}{}
	}
	return c.subs[i]
}

// confirm writes a (un)subscription confirmation: [kind, name, count], a
// push in RESP3; a nil name is a null.
func (c *Conn) confirm(kind string, name *string, n int) {
	// Written under CLIENT REPLY OFF too, as Redis 7.0 writes it.
	defer c.SetReplying(c.SetReplying(true))
	head := "*3\r\n"
	if c.Proto() == 3 {
		head = ">3\r\n"
	}
	c.Raw([]byte(head))
	c.BulkString(kind)
	if name == nil {
		c.Null()
	} else {
		c.BulkString(*name)
	}
	c.Int(int64(n))
}

var _ pubsub.Subscriber = (*Conn)(nil)

// Deliver queues a message for the client: [message, channel, payload] or
// [pmessage, pattern, channel, payload], a push in RESP3.
func (c *Conn) Deliver(pattern, channel string, payload []byte) {
	g, ok := c.rc.NetConn().(*guardConn)
	if !ok || c.closing.Load() {
		return
	}
	head := byte('*')
	if c.Proto() == 3 {
		head = '>'
	}
	var elems []string
	if pattern == "" {
		elems = []string{"message", channel, string(payload)}
	} else {
		elems = []string{"pmessage", pattern, channel, string(payload)}
	}
	frame := pushFrame(elems)
	frame[0] = head
	g.push(frame)
}

// DeliverShard queues a message of a shard channel for the client:
// [smessage, channel, payload], a push in RESP3.
func (c *Conn) DeliverShard(channel string, payload []byte) {
	g, ok := c.rc.NetConn().(*guardConn)
	if !ok || c.closing.Load() {
		return
	}
	frame := pushFrame([]string{"smessage", channel, string(payload)})
	if c.Proto() == 3 {
		frame[0] = '>'
	} else {
		frame[0] = '*'
	}
	g.push(frame)
}

// subscribedPing is PING in RESP2 subscribed mode: [pong, message].
func subscribedPing(c *Conn, args [][]byte) {
	c.Array(2)
	c.BulkString("pong")
	if len(args) == 2 {
		c.Bulk(args[1])
	} else {
		c.BulkString("")
	}
}

// pubsubHelp is Redis 7.0's PUBSUB HELP, line for line.
var pubsubHelp = []string{
	"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CHANNELS [<pattern>]",
	"    Return the currently active channels matching a <pattern> (default: '*').",
	"NUMPAT",
	"    Return number of subscriptions to patterns.",
	"NUMSUB [<channel> ...]",
	"    Return the number of subscribers for the specified channels, excluding",
	"    pattern subscriptions(default: no channels).",
	"SHARDCHANNELS [<pattern>]",
	"    Return the currently active shard level channels matching a <pattern> (default: '*').",
	"SHARDNUMSUB [<shardchannel> ...]",
	"    Return the number of subscribers for the specified shard level channel(s)",
	"HELP",
	"    Prints this help.",
}

// pubsubInfo is PUBSUB CHANNELS|NUMSUB|NUMPAT|SHARDCHANNELS|SHARDNUMSUB|HELP
// with Redis 7.0's replies and errors. The counts are this instance's
// own subscribers — the clients of the server the client talks to, as one
// Redis counts its clients — not those of other instances sharing the nodes.
func (s *Server) pubsubInfo(c *Conn, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "help" || sub == "numpat":
		if len(args) != 2 {
			c.Error("ERR wrong number of arguments for 'pubsub|" + sub + "' command")
			return
		}
		if sub == "numpat" {
			c.Int(int64(s.hub.NumPat()))
			return
		}
		c.Array(len(pubsubHelp))
		for _, l := range pubsubHelp {
			c.Simple(l)
		}
	case sub == "channels" || sub == "shardchannels":
		if len(args) > 3 {
			c.Error("ERR unknown subcommand or wrong number of arguments for '" + clip(args[1]) + "'. Try PUBSUB HELP.")
			return
		}
		kind := pubsub.Channel
		if sub == "shardchannels" {
			kind = pubsub.Shard
		}
		var names []string
		if len(args) == 3 {
			names = s.hub.Names(kind, string(args[2]), false)
		} else {
			names = s.hub.Names(kind, "", true)
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !c.mayChannel(n, pubsub.Channel) })
		c.Array(len(names))
		for _, n := range names {
			c.BulkString(n)
		}
	case sub == "numsub" || sub == "shardnumsub":
		kind := pubsub.Channel
		if sub == "shardnumsub" {
			kind = pubsub.Shard
		}
		c.Array(2 * (len(args) - 2))
		for _, a := range args[2:] {
			c.Bulk(a)
			n := 0 // a channel the user may not use has no subscriber it may know of
			if c.mayChannel(string(a), pubsub.Channel) {
				n = s.hub.NumSub(kind, string(a))
			}
			c.Int(int64(n))
		}
	default:
		c.Error("ERR unknown subcommand '" + clip(args[1]) + "'. Try PUBSUB HELP.")
	}
}

// msgNoChannel is Redis's NOPERM error for a channel outside the user's
// patterns.
const msgNoChannel = "NOPERM No permissions to access a channel"

// mayChannel reports whether c's user may subscribe or publish to name, a
// channel (or, for kind Pattern, a pattern). Channels follow the user's key
// patterns: the user may use a channel they match (a Redisson user limited
// to billing:* lists redisson_lock__channel:{billing:*} too). A pattern
// must be one of the user's patterns itself (Redis's rule for PSUBSCRIBE),
// without Redis's [classes] or escapes, or a channel name without
// wildcards that the user may use, so that every channel it matches is
// one the user may see.
func (c *Conn) mayChannel(name string, kind pubsub.Kind) bool {
	if !c.restricted() {
		return true
	}
	u := c.srv.user(c.userName())
	switch {
	case u == nil:
		return false
	case kind == pubsub.Pattern && strings.ContainsAny(name, "[\\"):
		return false // Redis's classes and escapes, which key patterns do not have
	case kind == pubsub.Pattern && slices.Contains(u.Keys, name):
		return true
	case kind == pubsub.Pattern && strings.ContainsAny(name, "*?"):
		return false
	}
	return u.mayTouch([]byte(name))
}
