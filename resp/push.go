package resp

import "strconv"

// maxPendingPushes bounds the push frames queued for one connection whose
// client does not read; later ones are dropped (what they said is also
// reported on the client's next command about it).
const maxPendingPushes = 1024

// Push sends a RESP3 push message of bulk strings (">3\r\n$8\r\nlocklost…")
// to the client at once, when the connection speaks RESP3, and reports
// whether it was queued. It does nothing on RESP2, which has no pushes, or
// on a connection the guard does not wrap.
//
// Push may be called from any goroutine and never blocks: the frame is
// queued and one goroutine per connection writes the queue. Every write to
// the socket — redcon's flush of a batch of replies, which is one Write,
// and a push — holds the guard's write lock, so a push lands between two
// replies, never inside one.
func (c *Conn) Push(elems ...string) bool {
	g, ok := c.rc.NetConn().(*guardConn)
	if !ok || c.Proto() != 3 || c.closing.Load() {
		return false
	}
	return g.push(pushFrame(elems))
}

// pushFrame encodes elems as a RESP3 push of bulk strings.
func pushFrame(elems []string) []byte {
	b := strconv.AppendInt([]byte{'>'}, int64(len(elems)), 10)
	b = append(b, crlf...)
	for _, e := range elems {
		b = strconv.AppendInt(append(b, '$'), int64(len(e)), 10)
		b = append(b, crlf...)
		b = append(append(b, e...), crlf...)
	}
	return b
}

// push queues frame and starts the writer unless it runs.
func (g *guardConn) push(frame []byte) bool {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	if len(g.pushes) >= maxPendingPushes {
		return false
	}
	g.pushes = append(g.pushes, frame)
	if !g.pushing {
		g.pushing = true
		go g.writePushes()
	}
	return true
}

// writePushes writes queued frames until none is left. A client that does
// not read blocks it until the connection closes and the write fails; then
// the rest is dropped.
func (g *guardConn) writePushes() {
	for {
		g.pmu.Lock()
		batch := g.pushes
		g.pushes = nil
		if len(batch) == 0 {
			g.pushing = false
			g.pmu.Unlock()
			return
		}
		g.pmu.Unlock()
		var out []byte
		for _, f := range batch {
			out = append(out, f...)
		}
		if _, err := g.Write(out); err != nil {
			g.pmu.Lock()
			g.pushes, g.pushing = nil, false
			g.pmu.Unlock()
			return
		}
	}
}
