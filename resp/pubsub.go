package resp

import (
	"sort"
	"strings"

	"github.com/lockproxy/lockproxy/pubsub"
)

// Pub/sub without a data Redis: SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE,
// PUNSUBSCRIBE and PUBLISH, with Redis's replies in RESP2 and RESP3. The
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
	}
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

// Subscriptions counts the channels and patterns c subscribed through
// the lock service.
func (c *Conn) Subscriptions() int { return c.subscriptions() }

// subscriptions counts c's channels and patterns.
func (c *Conn) subscriptions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.subs[0]) + len(c.subs[1])
}

// subscribe is SUBSCRIBE channel ... and PSUBSCRIBE pattern ...: one
// confirmation per name, with c's count of subscriptions after it.
func (s *Server) subscribe(c *Conn, args [][]byte) {
	pattern := len(args[0]) == len("psubscribe")
	kind := strings.ToLower(string(args[0]))
	for _, a := range args[1:] {
		name := string(a)
		c.mu.Lock()
		tab := c.subTable(pattern)
		_, had := tab[name]
		tab[name] = struct{}{}
		n := len(c.subs[0]) + len(c.subs[1])
		c.mu.Unlock()
		if !had {
			if err := s.hub.Subscribe(c.Context(), c, name, pattern); err != nil {
				c.mu.Lock()
				delete(tab, name)
				c.mu.Unlock()
				c.Error(err.Error())
				continue
			}
		}
		c.confirm(kind, &name, n)
	}
}

// unsubscribe is UNSUBSCRIBE [channel ...] and PUNSUBSCRIBE [pattern ...]:
// without names, from every one of the kind; with none to leave, one
// confirmation naming nothing.
func (s *Server) unsubscribe(c *Conn, args [][]byte) {
	pattern := len(args[0]) == len("punsubscribe")
	kind := strings.ToLower(string(args[0]))
	names := make([]string, 0, len(args)-1)
	for _, a := range args[1:] {
		names = append(names, string(a))
	}
	if len(names) == 0 {
		c.mu.Lock()
		for name := range c.subTable(pattern) {
			names = append(names, name)
		}
		c.mu.Unlock()
		sort.Strings(names)
	}
	if len(names) == 0 {
		c.confirm(kind, nil, c.subscriptions())
		return
	}
	for _, name := range names {
		c.mu.Lock()
		tab := c.subTable(pattern)
		_, had := tab[name]
		delete(tab, name)
		n := len(c.subs[0]) + len(c.subs[1])
		c.mu.Unlock()
		if had {
			s.hub.Unsubscribe(c, name, pattern)
		}
		c.confirm(kind, &name, n)
	}
}

// unsubscribeAll leaves every subscription of c (RESET, close).
func (s *Server) unsubscribeAll(c *Conn) {
	c.mu.Lock()
	subs := c.subs
	c.subs = [2]map[string]struct{}{}
	c.mu.Unlock()
	for i, tab := range subs {
		for name := range tab {
			s.hub.Unsubscribe(c, name, i == 1)
		}
	}
}

// publish is PUBLISH channel message: the number of receivers.
func (s *Server) publish(c *Conn, args [][]byte) {
	n, err := s.hub.Publish(c.Context(), string(args[1]), args[2])
	if err != nil {
		c.Error(err.Error())
		return
	}
	c.Int(n)
}

// subTable is c's table of channels (pattern false) or patterns; c.mu is held.
func (c *Conn) subTable(pattern bool) map[string]struct{} {
	i := 0
	if pattern {
		i = 1
	}
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
