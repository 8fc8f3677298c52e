package lists

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/resp"
	"github.com/lockproxy/lockproxy/upstream"
	"go.uber.org/zap"
)

// BLPOP and BRPOP over the nodes. Every node blocks on its own connection;
// the first element any node pops is the reply. The other calls are then
// unblocked, and the element is taken off the other nodes too, in the
// background and best effort: a node that popped the same element already
// is done; one that popped another element (a later signal) gets it back
// at the end it came from; one that popped nothing gets one copy removed
// (LREM), or, if it has none yet, keeps owing it (debts: the copy is
// dropped when it is popped there within debtKeep). A node that misses this clean-up
// for longer keeps its copy, and a later pop may return it: a spurious
// wake-up, which lock libraries tolerate by trying their acquire again. When the client disconnects or
// the timeout passes, every element a node popped meanwhile is put back.

// nodePop is one node's answer to a blocking pop.
type nodePop struct {
	node int
	p    upstream.Popped
	late bool // popped after the call was cancelled
	err  error
}

func (l *Lists) bpop(left bool) func(c *resp.Conn, args [][]byte) {
	return func(c *resp.Conn, args [][]byte) {
		if !l.available(c) {
			return
		}
		timeout, err := parseTimeout(args[len(args)-1])
		if err != nil {
			c.Error(err.Error())
			return
		}
		if l.blocked.Add(1) > int64(l.cfg.MaxBlocked) {
			l.blocked.Add(-1)
			c.Error("ERR max number of blocked clients reached")
			return
		}
		defer l.blocked.Add(-1)
		keys := make([]string, 0, len(args)-2)
		for _, k := range args[1 : len(args)-1] {
			keys = append(keys, string(k))
		}
		win, err := l.block(c, left, keys, timeout)
		switch {
		case err != nil:
			c.Error(err.Error())
		case win == nil:
			c.NullArray()
		default:
			key := win.p.Key
			if c.DB() > 0 {
				key = resp.ClientKey(key)
			}
			c.Array(2)
			c.BulkString(key)
			c.BulkString(win.p.Value)
		}
	}
}

// block runs the pop on every node until one pops, every node failed, the
// timeout (0: none) passes or the client leaves. It returns the winning
// pop, nil for none, and leaves the clean-up running.
func (l *Lists) block(c *resp.Conn, left bool, keys []string, timeout time.Duration) (*nodePop, error) {
	ctx := c.Context()
	if timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, timeout)
		defer cancelTimeout()
	}
	ctx, cancel := c.UntilClose(ctx)
	defer cancel()
	// The nodes time out a second after lockproxy would, so that a call
	// never outlives the client's wait by long even if its cancel is lost.
	nodeTimeout := 0.0
	if timeout > 0 {
		nodeTimeout = (timeout + time.Second).Seconds()
	}
	results := make(chan nodePop, len(l.nodes))
	for i, n := range l.nodes {
		go func() {
			for {
				p, late, err := n.BPop(ctx, left, keys, nodeTimeout)
				if err == nil && p.OK && !late && l.debts.pay(i, p.Key, p.Value) {
					continue // a copy of an element already popped elsewhere
				}
				results <- nodePop{node: i, p: p, late: late, err: err}
				return
			}
		}()
	}
	var failed []string
	var firstReply error
	got := make([]nodePop, 0, len(l.nodes))
	for range l.nodes {
		r := <-results
		got = append(got, r)
		switch {
		case r.err == nil && r.p.OK && !r.late:
			cancel()
			// Every other node owes the element from now on, before the
			// client can pop again; settle pays where it is removed.
			for i := range l.nodes {
				if i != r.node {
					l.debts.owe(i, r.p.Key, r.p.Value)
				}
			}
			l.settle(left, &r, got[:len(got)-1], results, len(l.nodes)-len(got))
			return &r, nil
		case r.err != nil && ctx.Err() == nil:
			failed = append(failed, l.nodes[r.node].Addr()+": "+r.err.Error())
			if firstReply == nil && isReply(r.err) {
				firstReply = r.err
			}
		}
	}
	cancel()
	l.settle(left, nil, got, results, 0)
	if len(failed) == len(l.nodes) {
		if firstReply != nil {
			return nil, firstReply // WRONGTYPE ..., as Redis says it
		}
		if errors.Is(failed0(got), upstream.ErrBlockedFull) {
			return nil, errors.New("ERR max number of blocked clients reached")
		}
		return nil, errors.New("NOQUORUM no node could block: " + strings.Join(failed, "; "))
	}
	return nil, nil
}

func failed0(got []nodePop) error {
	if len(got) == 0 {
		return nil
	}
	return got[0].err
}

// settle cleans up after a blocking pop, in the background: with a winner,
// the other nodes lose its element; without one, or for another element,
// what a node popped is put back. more results are still to come.
func (l *Lists) settle(left bool, win *nodePop, got []nodePop, results <-chan nodePop, more int) {
	l.cleanup.Add(1)
	go func() {
		defer l.cleanup.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.NodeTimeout+10*time.Second)
		defer cancel()
		for _, r := range got {
			l.settleNode(ctx, left, win, r)
		}
		for range more {
			l.settleNode(ctx, left, win, <-results)
		}
	}()
}

// settleNode cleans up one node's pop against the winner (nil: none).
func (l *Lists) settleNode(ctx context.Context, left bool, win *nodePop, r nodePop) {
	if win != nil && r.node == win.node {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.NodeTimeout)
	defer cancel()
	n := l.nodes[r.node]
	var err error
	switch {
	case r.p.OK && l.debts.pay(r.node, r.p.Key, r.p.Value):
		return // popped the winner's element (or another owed copy): consumed here too
	case r.p.OK: // put it back where it came from
		cmd := "RPUSH"
		if left {
			cmd = "LPUSH"
		}
		_, err = n.Do(ctx, cmd, r.p.Key, r.p.Value)
	case win != nil:
		count := -1 // from the tail for BRPOP
		if left {
			count = 1
		}
		var removed any
		removed, err = n.Do(ctx, "LREM", win.p.Key, count, win.p.Value)
		if removed == int64(1) {
			l.debts.pay(r.node, win.p.Key, win.p.Value) // else it is not there yet, or the node is away
		}
	}
	if err != nil {
		l.log.Debug("clean-up after a blocking pop", zap.String("node", n.Addr()), zap.Error(err))
	}
}
