package passthrough

import (
	"bufio"
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/resp"
)

// block runs a blocking command (BLPOP, …) on the client's own upstream
// connection, with no time bound of lockproxy's, while watching the
// client's socket. If the client goes away meanwhile, the data Redis is
// told to stop waiting (CLIENT UNBLOCK from a shared connection), and an
// element the command popped all the same is put back where it came from,
// so that no element is lost to a client that is no longer there. The
// client, if still connected (it sent QUIT), then gets the timeout's null.
func (r *Router) block(c *resp.Conn, up *upConn, name string, args [][]byte) ([]byte, error) {
	if err := up.speak(c.Proto(), r.cfg.Timeout); err != nil {
		return nil, notSent(err)
	}
	id, err := up.clientID(r.cfg.Timeout)
	if err != nil {
		return nil, notSent(err)
	}
	gone, stop := c.WatchClose()
	defer stop()
	returned := make(chan struct{})
	unblocked := make(chan struct{})
	go func() {
		defer close(unblocked)
		select {
		case <-gone:
			r.unblock(c.Proto(), c.ID(), id, up)
		case <-returned:
		}
	}()
	reply, err := up.roundTrip(args, 0)
	close(returned)
	<-unblocked
	stop()
	select {
	case <-gone:
	default:
		// The watch may not have run since the client closed: look once
		// more before handing it an element it would never read.
		if err != nil || restore(name, args, reply) == nil || !c.Left(leftGrace) {
			return reply, unknown(err)
		}
	}
	if err == nil {
		r.putBack(c.Proto(), c.ID(), name, args, reply)
	}
	return nullReply(c.Proto()), nil
}

// leftGrace is how long a popped element waits for a last sign that its
// client left (a close already on this host is seen at once).
const leftGrace = 2 * time.Millisecond

// unblock ends the upstream wait of the connection with id; if that cannot
// be done, it closes the connection, which ends the wait too.
func (r *Router) unblock(proto int, client uint64, id int64, up *upConn) {
	s, err := r.sharedFor(proto, client)
	if err == nil {
		_, err = s.do([][]byte{[]byte("CLIENT"), []byte("UNBLOCK"), strconv.AppendInt(nil, id, 10)}, r.cfg.Timeout)
	}
	if err != nil {
		up.close()
	}
}

// putBack returns what a blocking pop took for a client that left before
// the reply reached it: BLPOP's element to the head of its list (LPUSH),
// BRPOP's to the tail (RPUSH), BLMPOP's elements to the side they came
// from, BZPOPMIN/BZPOPMAX/BZMPOP's members with their scores. BLMOVE and
// BRPOPLPUSH moved the element into their destination list, where it stays;
// XREAD and WAIT take nothing; XREADGROUP's entries stay pending in the
// group. Another client's push or pop in between can change the order: the
// element goes back to the end it came from, not to its old position.
func (r *Router) putBack(proto int, client uint64, name string, args [][]byte, reply []byte) {
	cmd := restore(name, args, reply)
	if cmd == nil {
		return
	}
	s, err := r.sharedFor(proto, client)
	if err == nil {
		var back []byte
		back, err = s.do(cmd, r.cfg.Timeout)
		if err == nil && len(back) > 0 && (back[0] == '-' || back[0] == '!') {
			err = errors.New(string(trimCRLF(back)))
		}
	}
	if err != nil {
		r.stats.Failed.Add(1)
	}
}

// restore is the command that undoes a blocking pop's reply, nil when
// there is nothing to undo (a null reply, an error, or a command that
// takes nothing).
func restore(name string, args [][]byte, reply []byte) [][]byte {
	v, err := parseValue(bufio.NewReader(bytes.NewReader(reply)))
	top, ok := v.([]any)
	if err != nil || !ok || len(top) < 2 {
		return nil
	}
	key, ok := top[0].([]byte)
	if !ok {
		return nil
	}
	switch name {
	case "blpop":
		return strs("LPUSH", key, top[1])
	case "brpop":
		return strs("RPUSH", key, top[1])
	case "bzpopmin", "bzpopmax":
		if len(top) != 3 {
			return nil
		}
		return strs("ZADD", key, top[2], top[1])
	case "blmpop":
		elems, _ := top[1].([]any)
		verb := "LPUSH"
		if leftOrRight(args) == "right" {
			verb = "RPUSH"
		}
		out := []any{}
		for i := len(elems) - 1; i >= 0; i-- { // the first popped goes back last, nearest its end
			out = append(out, elems[i])
		}
		return strs(verb, key, out...)
	case "bzmpop":
		pairs, _ := top[1].([]any)
		var out []any
		for _, p := range pairs {
			ms, ok := p.([]any)
			if !ok || len(ms) != 2 {
				return nil
			}
			out = append(out, ms[1], ms[0])
		}
		return strs("ZADD", key, out...)
	}
	return nil
}

// leftOrRight is BLMPOP's direction argument, in lower case.
func leftOrRight(args [][]byte) string {
	for _, a := range args {
		if s := string(bytes.ToLower(a)); s == "left" || s == "right" {
			return s
		}
	}
	return ""
}

// strs is a command of verb and key followed by vals, which must all be
// strings; nil if one is not (an unexpected reply is left alone).
func strs(verb string, key []byte, vals ...any) [][]byte {
	if len(vals) == 0 {
		return nil
	}
	out := [][]byte{[]byte(verb), key}
	for _, v := range vals {
		b, ok := v.([]byte)
		if !ok {
			return nil
		}
		out = append(out, b)
	}
	return out
}

// parseValue decodes one reply read whole by readReply into []byte
// (strings, numbers and doubles as their text), []any (arrays, sets,
// pushes, maps flattened) or nil (nulls).
func parseValue(br *bufio.Reader) (any, error) {
	line, err := readLine(br, nil)
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-2]
	if len(line) == 0 {
		return nil, errProtocol
	}
	body := line[1:]
	switch line[0] {
	case '+', ':', ',', '(', '#':
		return body, nil
	case '-', '!':
		return nil, errors.New(string(body))
	case '_':
		return nil, nil
	case '$', '=':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := readFull(br, b); err != nil {
			return nil, err
		}
		return b[:n], nil
	case '*', '~', '>', '%':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < 0 {
			return nil, err
		}
		if line[0] == '%' {
			n *= 2
		}
		out := make([]any, 0, min(n, 64))
		for i := 0; i < n; i++ {
			v, err := parseValue(br)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, errProtocol
}

// nullReply is what a blocking command answers when it times out.
func nullReply(proto int) []byte {
	if proto == 3 {
		return []byte("_\r\n")
	}
	return []byte("*-1\r\n")
}
