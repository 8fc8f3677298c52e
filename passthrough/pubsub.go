package passthrough

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/resp"
)

// streams are the commands after which the data Redis sends what nobody
// asked for (pub/sub messages, MONITOR's lines): the client gets a relay.
var streams = set("subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "monitor")

// relay is a client's upstream connection in pub/sub or MONITOR mode: the
// client's commands for the data Redis are written to it as they come, and
// a goroutine writes everything it sends to the client as it arrives, so
// replies and messages keep the data Redis's order. A command lockproxy
// answers itself waits first for a barrier — PING with a random token, whose
// reply the relay swallows — so that its reply follows those of earlier
// commands.
type relay struct {
	up    *upConn
	token []byte
	ping  [][]byte      // the barrier command
	pongs [2][]byte     // its reply outside and inside RESP2's subscribed mode
	done  chan struct{} // closed when the relay goroutine has stopped writing

	wmu   sync.Mutex   // serialises writes to up
	proto atomic.Int32 // the protocol up speaks (switchProto changes it)

	mu       sync.Mutex
	barriers []chan struct{} // waiting for their PING's reply, in order
	hello    *helloWait      // a protocol switch waiting for its reply; nil if none
	channels int             // subscriptions to channels and patterns
	shard    int             // subscriptions to shard channels
	err      error           // why the relay stopped
}

// errReset ends a relay on the client's RESET: the client stays.
var errReset = errors.New("reset")

// startRelay puts the client in relay mode on up and sends args, the first
// command of the mode.
func (r *Router) startRelay(c *resp.Conn, st *client, args [][]byte) error {
	if err := st.up.speak(c.Proto(), r.cfg.Timeout); err != nil {
		return err
	}
	if _, err := st.up.clientID(r.cfg.Timeout); err != nil { // for other clients' TRACKING REDIRECT and UNBLOCK
		return err
	}
	return r.newRelay(c, st).send(args)
}

// relayAfterExec puts the client in relay mode after an EXEC whose
// transaction subscribed it to channels and shard channels.
func (r *Router) relayAfterExec(c *resp.Conn, st *client, channels, shard int) {
	// Not asking its CLIENT ID here, unlike startRelay: a message may
	// already follow EXEC's reply, and RESP2's subscribed mode refuses
	// CLIENT. Only a TRACKING REDIRECT to this client fails for want of it.
	rl := r.newRelay(c, st)
	rl.mu.Lock()
	rl.channels, rl.shard = channels, shard
	rl.mu.Unlock()
}

// newRelay starts relaying what st.up sends to c.
func (r *Router) newRelay(c *resp.Conn, st *client) *relay {
	_ = st.up.nc.SetDeadline(time.Time{})
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	h := []byte("lockproxy-barrier-" + hex.EncodeToString(tok))
	bulk := append(append(strconv.AppendInt([]byte{'$'}, int64(len(h)), 10), "\r\n"...), h...)
	bulk = append(bulk, "\r\n"...)
	rl := &relay{up: st.up, token: h, ping: [][]byte{[]byte("PING"), h}, done: make(chan struct{})}
	rl.proto.Store(int32(st.up.proto))
	rl.pongs = [2][]byte{bulk, append([]byte("*2\r\n$4\r\npong\r\n"), bulk...)}
	st.sub = rl
	c.Stream()
	go r.relayTo(c, rl)
	return rl
}

// send writes one command to the data Redis.
func (rl *relay) send(args [][]byte) error {
	rl.wmu.Lock()
	defer rl.wmu.Unlock()
	_ = rl.up.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := rl.up.nc.Write(appendCommand(nil, args)); err != nil {
		rl.stop(err)
		return err
	}
	return nil
}

// relayTo writes what the data Redis sends to the client until either side
// closes. The client is dropped if the data Redis goes: its subscriptions
// are gone, and it resubscribes when it reconnects.
func (r *Router) relayTo(c *resp.Conn, rl *relay) {
	defer close(rl.done)
	br := rl.up.br
	for {
		frame, err := readReply(br, nil)
		if err != nil {
			if rl.stop(err) || !errors.Is(rl.stopped(), errReset) {
				r.stats.Failed.Add(1)
				c.Drop()
			}
			return
		}
		if rl.isBarrier(frame) {
			continue
		}
		if rl.isHello(frame) {
			continue
		}
		if bytes.Contains(frame, rl.token) {
			continue // the barrier in MONITOR's stream
		}
		rl.count(frame)
		if p := c.Proto(); int(rl.proto.Load()) != p {
			fitProto(frame, p)
		}
		if !c.Write(frame) {
			rl.stop(errors.New("client gone"))
			return
		}
	}
}

// isBarrier reports whether frame answers a barrier, and releases it.
func (rl *relay) isBarrier(frame []byte) bool {
	if string(frame) != string(rl.pongs[0]) && string(frame) != string(rl.pongs[1]) {
		return false
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.barriers) > 0 {
		close(rl.barriers[0])
		rl.barriers = rl.barriers[1:]
	}
	return true
}

// fitProto makes a pub/sub message frame an array in RESP2 and a push in
// RESP3, in place: the two differ only in their first byte. relayTo uses it
// while the relay's connection and the client speak different protocols:
// after lockproxy answered a HELLO that switched the client, until the
// client's next command switches the connection. (Switching it before
// lockproxy's HELLO could not be undone if that HELLO failed: RESP2's
// subscribed mode refuses HELLO.)
func fitProto(frame []byte, proto int) {
	if len(frame) < 16 || (frame[0] != '*' && frame[0] != '>') {
		return
	}
	body := frame[1:]
	if !bytes.HasPrefix(body, []byte("3\r\n$7\r\nmessage\r\n")) && !bytes.HasPrefix(body, []byte("4\r\n$8\r\npmessage\r\n")) &&
		!bytes.HasPrefix(body, []byte("3\r\n$8\r\nsmessage\r\n")) {
		return
	}
	frame[0] = '*'
	if proto == 3 {
		frame[0] = '>'
	}
}

// helloWait is a HELLO sent on the relay's connection by switchProto.
type helloWait struct {
	reply  chan []byte   // gets HELLO's reply, which the client does not see
	resume chan struct{} // closed when the relay may write to the client again
}

// isHello reports whether frame answers a HELLO switchProto sent, and
// hands it over. With no other reply awaited, the only frames that are not
// pushes (RESP3) or MONITOR lines (simple strings) answer it. The relay
// then waits until switchProto has the write turn back.
func (rl *relay) isHello(frame []byte) bool {
	rl.mu.Lock()
	h := rl.hello
	rl.mu.Unlock()
	if h == nil || frame[0] == '>' || frame[0] == '+' {
		return false
	}
	h.reply <- frame
	<-h.resume
	return true
}

// switchProto makes the relay's connection speak proto, the client's since
// its last HELLO. It is called with the write turn while no command's
// reply is awaited on the connection (the HELLO went through barrier, and
// nothing was sent since). A HELLO the data Redis refuses returns its error
// reply.
func (rl *relay) switchProto(c *resp.Conn, proto int, timeout time.Duration) ([]byte, error) {
	h := &helloWait{reply: make(chan []byte, 1), resume: make(chan struct{})}
	defer close(h.resume) // after the write turn is back: the relay's next write follows this command's reply
	rl.mu.Lock()
	if rl.err != nil {
		rl.mu.Unlock()
		return nil, rl.err
	}
	rl.hello = h
	rl.mu.Unlock()
	defer func() {
		rl.mu.Lock()
		rl.hello = nil
		rl.mu.Unlock()
	}()
	if err := rl.send([][]byte{[]byte("HELLO"), []byte(strconv.Itoa(proto))}); err != nil {
		return nil, err
	}
	reply, err := await(rl, c, h.reply, timeout)
	if err != nil {
		return nil, err
	}
	if reply[0] == '-' || reply[0] == '!' {
		return reply, nil
	}
	rl.up.proto = proto
	rl.proto.Store(int32(proto))
	return nil, nil
}

// count follows the subscription counts the data Redis reports.
func (rl *relay) count(frame []byte) {
	if len(frame) < 4 || (frame[0] != '*' && frame[0] != '>') || frame[1] != '3' {
		return
	}
	v, err := parseValue(bufio.NewReader(bytes.NewReader(frame)))
	if err != nil {
		return
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	countIn(v, &rl.channels, &rl.shard)
}

// countIn sets channels or shard from v when v reports a subscription
// count ([subscribe ch n] and the like).
func countIn(v any, channels, shard *int) {
	elems, ok := v.([]any)
	if !ok || len(elems) != 3 {
		return
	}
	kind, _ := elems[0].([]byte)
	n, _ := elems[2].([]byte)
	k, err := strconv.Atoi(string(n))
	if err != nil {
		return
	}
	switch string(kind) {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe":
		*channels = k
	case "ssubscribe", "sunsubscribe":
		*shard = k
	}
}

// subscriptionsIn are the subscription counts an EXEC's reply leaves, by
// the last (un)subscribe reply among its elements.
func subscriptionsIn(exec []byte) (channels, shard int) {
	v, err := parseValue(bufio.NewReader(bytes.NewReader(exec)))
	elems, ok := v.([]any)
	if err != nil || !ok {
		return 0, 0
	}
	for _, e := range elems {
		countIn(e, &channels, &shard)
	}
	return channels, shard
}

// barrier waits until the replies of every command sent so far were
// written to the client.
func (rl *relay) barrier(c *resp.Conn, timeout time.Duration) error {
	ch := make(chan struct{})
	rl.mu.Lock()
	if rl.err != nil {
		rl.mu.Unlock()
		return rl.err
	}
	rl.barriers = append(rl.barriers, ch)
	rl.mu.Unlock()
	if err := rl.send(rl.ping); err != nil {
		return err
	}
	_, err := await(rl, c, ch, timeout)
	return err
}

// await waits, without c's turn, for ch (a value or its close) until
// timeout; a relay that stopped meanwhile answers its error, and one that
// does not answer within timeout is stopped and c dropped.
func await[T any](rl *relay, c *resp.Conn, ch <-chan T, timeout time.Duration) (v T, err error) {
	c.Unheld(func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case v = <-ch:
		case <-rl.done:
			err = rl.stopped()
		case <-t.C:
			err = errors.New("no reply within the timeout")
			rl.stop(err)
			c.Drop()
		}
	})
	return v, err
}

// subscribed reports whether the upstream connection is in RESP2's
// subscribed mode, as of the last barrier.
func (rl *relay) subscribed() bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.channels > 0 || rl.shard > 0
}

// stop ends the relay once; it reports whether this call ended it.
func (rl *relay) stop(err error) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.err != nil {
		return false
	}
	rl.err = err
	rl.up.close()
	return true
}

func (rl *relay) stopped() error {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.err
}

// routeRelayed handles a command of a client in relay mode: commands for
// the data Redis and PING go to it; a command lockproxy answers waits for
// the replies to earlier ones and, on RESP2 while subscribed, is refused
// as Redis refuses it.
func (r *Router) routeRelayed(c *resp.Conn, st *client, name string, args [][]byte, dest destination) bool {
	rl := st.sub
	if p := c.Proto(); name != "reset" && p != rl.up.proto {
		// lockproxy answered a HELLO that changed the client's protocol
		// (RESP3 allows it while subscribed): the relay's connection
		// follows before anything else is sent on it. Messages relayed
		// meanwhile were fitted to the client's protocol (fitProto).
		if refused, err := rl.switchProto(c, p, r.cfg.Timeout); err != nil || refused != nil {
			r.stats.Failed.Add(1)
			c.Drop() // the two sides would disagree on the protocol
			return true
		}
	}
	switch {
	case name == "reset":
		rl.stop(errReset)
		c.Unheld(func() { <-rl.done })
		st.sub = nil
		r.reset(st)
		return false
	case dest == toData || name == "ping":
		if name == "client" {
			var ok bool
			if args, ok = r.relayedClient(c, args); !ok {
				return true
			}
		}
		r.stats.Forwarded.Add(1)
		switch name {
		case "multi":
			st.multi = true
		case "exec", "discard":
			st.multi, st.dirty = false, false
		}
		if err := rl.send(args); err != nil {
			r.stats.Failed.Add(1)
			c.Drop()
		}
		return true
	}
	if err := rl.barrier(c, r.cfg.Timeout); err != nil {
		return true // the connection is dropped
	}
	if name != "quit" && c.Proto() == 2 && rl.subscribed() {
		c.Error("ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
		return true
	}
	if name == "client" && isClientReply(args) {
		// What the data Redis sends here is relayed as it comes, replies
		// and messages alike: lockproxy cannot tell which to hold back.
		c.Error("ERR lockproxy does not support CLIENT REPLY on a connection in pub/sub, MONITOR or RESP3 tracking mode")
		return true
	}
	return r.dispatch(c, st, name, args, dest)
}
