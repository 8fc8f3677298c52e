package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Clients' signal lists on a node (ListNode): the non-blocking list
// commands on a go-redis client, and BLPOP/BRPOP on dedicated connections
// of their own, one per blocked call, so that a blocked call never holds a
// connection another command needs. A blocked call that must end early is
// unblocked with CLIENT UNBLOCK from the go-redis client (its reply, an
// element the node popped meanwhile included, is still read), or, when the
// node does not answer that, its connection is closed: the node then drops
// the blocked client itself. No connection is left blocked.

// ErrBlockedFull is returned when a node already holds its limit of
// blocked calls.
var ErrBlockedFull = errors.New("upstream: too many blocked calls on the node")

// ListNode runs list commands on one Redis node.
type ListNode struct {
	o      RedisOptions
	client *redis.Client
	slots  chan struct{}   // one per blocked call in flight: the limit
	idle   chan *blockConn // connections back from a call that ended cleanly
	closed atomic.Bool     // Close ran: connections are no longer kept
}

// NewListNode returns the list commands of the node at o.Addr, allowing
// maxBlocked blocked calls at once (default 1000) and keeping up to 16
// idle blocking connections.
func NewListNode(o RedisOptions, maxBlocked int) *ListNode {
	o = o.withDefaults()
	if maxBlocked <= 0 {
		maxBlocked = 1000
	}
	co := o.clientOptions()
	co.PoolSize = 4
	return &ListNode{o: o, client: redis.NewClient(co), slots: make(chan struct{}, maxBlocked), idle: make(chan *blockConn, 16)}
}

// Addr is the node's address.
func (n *ListNode) Addr() string { return n.o.Addr }

// Close closes the node's idle connections and its client. Calls still
// blocked close theirs as they end.
func (n *ListNode) Close() error {
	n.closed.Store(true)
	for {
		select {
		case c := <-n.idle:
			c.close()
		default:
			return n.client.Close()
		}
	}
}

// Do runs one non-blocking command (LPUSH, LPOP, LLEN, LREM, ...) and
// returns its reply as go-redis reads it: nil for a null.
func (n *ListNode) Do(ctx context.Context, args ...any) (any, error) {
	v, err := n.client.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// Popped is what a blocked pop returned: ok false for a timeout.
type Popped struct {
	Key, Value string
	OK         bool
}

// BPop sends BLPOP (left) or BRPOP keys... with the node-side timeout
// (seconds, 0 forever) on a dedicated connection and waits for the answer
// or ctx. When ctx ends first, it unblocks the call and returns what the
// node popped meanwhile (late true), if anything, so the caller can put it
// back; err is then ctx's error only if nothing came.
func (n *ListNode) BPop(ctx context.Context, left bool, keys []string, timeout float64) (p Popped, late bool, err error) {
	select {
	case n.slots <- struct{}{}:
	default:
		return Popped{}, false, ErrBlockedFull
	}
	defer func() { <-n.slots }()
	cmd := "BRPOP"
	if left {
		cmd = "BLPOP"
	}
	args := make([]any, 0, len(keys)+2)
	args = append(args, cmd)
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, strconv.FormatFloat(timeout, 'f', -1, 64))
	var c *blockConn
	var answer chan blockAnswer
	for fresh := false; ; fresh = true {
		if c, err = n.conn(ctx, fresh); err != nil {
			return Popped{}, false, err
		}
		answer = make(chan blockAnswer, 1)
		go func() {
			p, err := c.pop(args)
			answer <- blockAnswer{p, err}
		}()
		select {
		case a := <-answer:
			n.release(c, a.err)
			if a.err != nil && !isReplyError(a.err) && !fresh {
				continue // an idle connection the node dropped (restarted): once more on a new one
			}
			return a.p, false, a.err
		case <-ctx.Done():
		}
		break
	}
	a := n.unblock(c, answer)
	if a.err == nil && a.p.OK {
		return a.p, true, nil
	}
	return Popped{}, false, ctx.Err()
}

type blockAnswer struct {
	p   Popped
	err error
}

// unblock ends a blocked call early: CLIENT UNBLOCK, then its reply within
// the node's timeout; failing either, the connection is closed.
func (n *ListNode) unblock(c *blockConn, answer chan blockAnswer) blockAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), n.o.Timeout)
	defer cancel()
	if c.id > 0 {
		if err := n.client.ClientUnblock(ctx, c.id).Err(); err == nil {
			select {
			case a := <-answer:
				n.release(c, a.err)
				return a
			case <-ctx.Done():
			}
		}
	}
	c.close() // the node drops a blocked client whose connection closed
	select {
	case a := <-answer: // what was read before the close
		return a
	case <-ctx.Done():
		return blockAnswer{err: ctx.Err()}
	}
}

// conn is an idle blocking connection, or a new one (always when fresh).
func (n *ListNode) conn(ctx context.Context, fresh bool) (*blockConn, error) {
	if !fresh {
		select {
		case c := <-n.idle:
			return c, nil
		default:
		}
	}
	return dialBlock(ctx, n.o)
}

// release keeps c for the next call if it ended cleanly, else closes it.
func (n *ListNode) release(c *blockConn, err error) {
	if err != nil || n.closed.Load() {
		c.close()
		return
	}
	select {
	case n.idle <- c:
	default:
		c.close()
	}
}

// blockConn is one connection for blocked calls: a go-redis client of
// its own with a single connection, configured as the node's other
// connections (TLS, AUTH, database). A pop is sent without a deadline: it
// waits as long as its node-side timeout says (go-redis's BLPop would round
// that timeout to whole seconds, so the command is sent with Do). The net.Conn its
// dialer made is kept so that a call blocked in a read can be cut off:
// closing the client does not interrupt a read in flight.
type blockConn struct {
	client    *redis.Client
	id        int64 // CLIENT ID; 0 when the node does not say (miniredis)
	mu        sync.Mutex
	nc        net.Conn // the connection's socket, once dialled
	closeOnce sync.Once
}

func dialBlock(ctx context.Context, o RedisOptions) (*blockConn, error) {
	c := &blockConn{}
	co := o.clientOptions()
	co.PoolSize, co.MaxIdleConns = 1, 1
	co.ReadTimeout = -1 // deadlines come from the context only: a pop has none (its node-side timeout ends it)
	tlsConfig := co.TLSConfig
	co.TLSConfig = nil // the dialer below does the handshake: a Dialer replaces go-redis's own
	co.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: o.DialTimeout}
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.nc = nc
		c.mu.Unlock()
		if tlsConfig == nil {
			return nc, nil
		}
		tc := tls.Client(nc, tlsConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		return tc, nil
	}
	c.client = redis.NewClient(co)
	ctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	id, err := c.client.ClientID(ctx).Result()
	switch {
	case err == nil:
		c.id = id
	case !isReplyError(err):
		c.close()
		return nil, err
	}
	return c, nil
}

// close cuts the connection, a read in flight included: the node then
// drops the blocked client itself.
func (c *blockConn) close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		nc := c.nc
		c.mu.Unlock()
		if nc != nil {
			_ = nc.Close()
		}
		_ = c.client.Close()
	})
}

// pop sends a blocking pop and reads its reply: [key, value] or a null.
func (c *blockConn) pop(args []any) (Popped, error) {
	v, err := c.client.Do(context.Background(), args...).Result()
	if errors.Is(err, redis.Nil) {
		return Popped{}, nil
	}
	if err != nil {
		return Popped{}, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return Popped{}, fmt.Errorf("upstream: unexpected reply to %s: %v", args[0], v)
	}
	k, _ := arr[0].(string)
	val, _ := arr[1].(string)
	return Popped{Key: k, Value: val, OK: true}, nil
}

// isReplyError tells an error reply of the node from a failed connection.
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
