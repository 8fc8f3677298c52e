package lists

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/resp"
	"github.com/lockproxy/lockproxy/upstream"
	"go.uber.org/zap"
)

// Node is one node's list commands (upstream.ListNode).
type Node interface {
	Addr() string
	Do(ctx context.Context, args ...any) (any, error)
	BPop(ctx context.Context, left bool, keys []string, timeout float64) (p upstream.Popped, late bool, err error)
}

var _ Node = (*upstream.ListNode)(nil)

// Config configures Lists.
type Config struct {
	// MaxBlocked bounds the clients blocked in BLPOP/BRPOP at once
	// (default 1000); one more gets "-ERR max number of blocked clients
	// reached".
	MaxBlocked int
	// NodeTimeout bounds one non-blocking call to one node, and the
	// clean-up after a blocking pop (default 2 s).
	NodeTimeout time.Duration
}

// Lists serves the list commands over nodes; nil nodes: every command is
// refused with an error naming the backends that have them.
type Lists struct {
	nodes   []Node
	cfg     Config
	log     *zap.Logger
	blocked atomic.Int64
	debts   debts
	cleanup atomic.Int64 // clean-ups after a blocking pop still running, for tests
}

// New returns the list commands over nodes.
func New(nodes []Node, cfg Config, log *zap.Logger) *Lists {
	if cfg.MaxBlocked <= 0 {
		cfg.MaxBlocked = 1000
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 2 * time.Second
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Lists{nodes: nodes, cfg: cfg, log: log}
}

// Blocked is the number of clients blocked now.
func (l *Lists) Blocked() int { return int(l.blocked.Load()) }

// errNoBackend refuses the list commands on the zookeeper backend.
const errNoBackend = "ERR list commands (BLPOP, BRPOP, LPUSH ...) need the redlock or embedded backend: the zookeeper backend has no lists"

// Commands are the list commands for resp's table.
func (l *Lists) Commands() []resp.Command {
	return []resp.Command{
		{Name: "blpop", Arity: -3, Flags: resp.NoMulti, Handler: l.bpop(true), Class: resp.Legacy, Keys: blockKeys, Waits: blocks},
		{Name: "brpop", Arity: -3, Flags: resp.NoMulti, Handler: l.bpop(false), Class: resp.Legacy, Keys: blockKeys, Waits: blocks},
		{Name: "lpop", Arity: -2, Handler: l.pop, Class: resp.Legacy, Keys: resp.FirstKey},
		{Name: "rpop", Arity: -2, Handler: l.pop, Class: resp.Legacy, Keys: resp.FirstKey},
		{Name: "lpush", Arity: -3, Handler: l.push, Class: resp.Legacy, Keys: resp.FirstKey},
		{Name: "rpush", Arity: -3, Handler: l.push, Class: resp.Legacy, Keys: resp.FirstKey},
		{Name: "llen", Arity: 2, Handler: l.llen, Class: resp.Legacy, Keys: resp.FirstKey},
	}
}

// blocks says BLPOP and BRPOP count against max_blocked_clients.
func blocks([][]byte) resp.Waits { return resp.BlockedClient }

// blockKeys are BLPOP's keys: all arguments but the timeout.
func blockKeys(args [][]byte) [][]byte { return args[1 : len(args)-1] }

func (l *Lists) majority() int { return len(l.nodes)/2 + 1 }

// answer is one node's reply to a non-blocking command.
type answer struct {
	node int
	v    any
	err  error
}

// each runs args on every node at once and returns the answers of those
// that answered, in node order, or an error when fewer than a majority did
// (a node's error reply counts as an answer).
func (l *Lists) each(ctx context.Context, args [][]byte) ([]answer, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.NodeTimeout)
	defer cancel()
	cmd := make([]any, len(args))
	for i, a := range args {
		cmd[i] = string(a)
	}
	out := make([]answer, len(l.nodes))
	done := make(chan int, len(l.nodes))
	for i, n := range l.nodes {
		go func() {
			v, err := n.Do(ctx, cmd...)
			out[i] = answer{i, v, err}
			done <- i
		}()
	}
	var answered []answer
	var failed []string
	for range l.nodes {
		i := <-done
		a := out[i]
		if a.err != nil && !isReply(a.err) {
			failed = append(failed, l.nodes[i].Addr()+": "+a.err.Error())
			continue
		}
		answered = append(answered, a)
	}
	if len(answered) < l.majority() {
		return nil, fmt.Errorf("NOQUORUM %d of %d nodes answered, fewer than a majority: %s",
			len(answered), len(l.nodes), strings.Join(failed, "; "))
	}
	return answered, nil
}

// isReply tells a node's error reply (WRONGTYPE ...) from a failure to
// reach it.
func isReply(err error) bool {
	var re interface{ RedisError() }
	return errors.As(err, &re)
}

// replyError writes the first error reply among answers, if any is there,
// and reports whether it did.
func replyError(c *resp.Conn, answers []answer) bool {
	for _, a := range answers {
		if a.err != nil {
			c.Error(a.err.Error())
			return true
		}
	}
	return false
}

// push is LPUSH/RPUSH key element...: on every node; the reply is the
// longest list a node reports.
func (l *Lists) push(c *resp.Conn, args [][]byte) {
	if !l.available(c) {
		return
	}
	answers, err := l.each(c.Context(), args)
	if err != nil {
		c.Error(err.Error())
		return
	}
	if replyError(c, answers) {
		return
	}
	c.Int(longest(answers))
}

// llen is LLEN key: the longest list a node holds, so that a signal any
// node has shows.
func (l *Lists) llen(c *resp.Conn, args [][]byte) {
	l.push(c, args)
}

func longest(answers []answer) int64 {
	var n int64
	for _, a := range answers {
		if v, ok := a.v.(int64); ok {
			n = max(n, v)
		}
	}
	return n
}

// pop is LPOP/RPOP key [count]: it pops on every node and replies what
// most nodes popped (a null only if every node answering had nothing):
// signals pushed on every node pop alike.
func (l *Lists) pop(c *resp.Conn, args [][]byte) {
	if !l.available(c) {
		return
	}
	if len(args) > 3 {
		c.Error("ERR wrong number of arguments for '" + strings.ToLower(string(args[0])) + "' command")
		return
	}
	answers, err := l.each(c.Context(), args)
	if err != nil {
		c.Error(err.Error())
		return
	}
	if replyError(c, answers) {
		return
	}
	for i, a := range answers {
		if v, ok := a.v.(string); ok && l.debts.pay(a.node, string(args[1]), v) {
			answers[i].v = nil // a copy of an element a blocking pop took
		}
	}
	writeValue(c, mostCommon(answers), len(args) == 3)
}

// mostCommon is the value most answers agree on, ignoring nulls; the
// earliest node's on a tie; nil when every answer is null.
func mostCommon(answers []answer) any {
	counts := map[string]int{}
	var best any
	bestN := 0
	for _, a := range answers {
		if a.v == nil {
			continue
		}
		k := fmt.Sprintf("%#v", a.v)
		counts[k]++
		if counts[k] > bestN {
			best, bestN = a.v, counts[k]
		}
	}
	return best
}

// writeValue writes a popped value: a bulk, an array of bulks, or a null
// (a null array when array).
func writeValue(c *resp.Conn, v any, array bool) {
	switch v := v.(type) {
	case nil:
		if array {
			c.NullArray()
		} else {
			c.Null()
		}
	case string:
		c.BulkString(v)
	case []any:
		c.Array(len(v))
		for _, e := range v {
			s, _ := e.(string)
			c.BulkString(s)
		}
	default:
		c.Error(fmt.Sprintf("ERR unexpected reply from the nodes: %v", v))
	}
}

// available refuses the command when there are no nodes (zookeeper).
func (l *Lists) available(c *resp.Conn) bool {
	if len(l.nodes) == 0 {
		c.Error(errNoBackend)
		return false
	}
	return true
}
