package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/quorum"
)

// Scripts outside the catalog (quorum.OpEval) go through the node's
// pipelines like lockproxy's own scripts: EVALSHA with the script's SHA1
// and the client's KEYS and ARGV unchanged, EVAL when the node answers
// NOSCRIPT. Their keys are the client's, not under the node's prefix.

// scriptFor is the script and arguments that run op on the node.
func (n *RedisNode) scriptFor(op *quorum.Op) (*script, []string, []any) {
	if op.Kind == quorum.OpTurn || op.Kind == quorum.OpTurnBack || op.Kind == quorum.OpRepair || op.Kind == quorum.OpEval && op.Turn != "" {
		return n.turnFor(op)
	}
	if op.Kind != quorum.OpEval {
		return n.command(op)
	}
	args := make([]any, len(op.Args))
	for i, a := range op.Args {
		args[i] = a
	}
	return &script{name: "script " + op.Script.SHA, src: string(op.Script.Src), sha: op.Script.SHA}, op.Keys, args
}

// evalReply is the node's reply to an OpEval. An error the script raised
// (or a command in it did) is the script's reply, a Value of kind Error;
// errors that say the node cannot run scripts now (isNodeFailure) and
// failed calls are the node's failure, Err. So is the refusal of a script
// guarded by its turn (op.Turn) when the turn is not its own on the node:
// quorum.ErrTurnLost. The guarded script's SHA1 in an error the script
// raised (Redis names the script in it) is the client's script's.
func evalReply(op *quorum.Op, tag int, v any, err error, inc string) quorum.Reply {
	r := quorum.Reply{Tag: tag, Incarnation: inc}
	var reply redis.Error
	switch {
	case errors.Is(err, redis.Nil):
		r.Value = luascript.Reply{Kind: luascript.Null}
	case err != nil && op.Turn != "" && redis.HasErrorPrefix(err, turnRefused+op.Turn):
		r.Err = quorum.ErrTurnLost
	case err != nil && errors.As(err, &reply) && !isNodeFailure(err):
		msg := err.Error()
		if op.Turn != "" {
			msg = strings.ReplaceAll(msg, guardedScript(op.Script, op.State).sha, op.Script.SHA)
		}
		r.Value = luascript.Reply{Kind: luascript.Error, Str: msg}
	case err != nil:
		r.Err = err
	case op.State:
		if v, r.States, r.Err = stated(op, v); r.Err == nil {
			r.Value, r.Err = toReply(v)
		}
	default:
		r.Value, r.Err = toReply(v)
	}
	return r
}

// toReply converts a script's reply as go-redis read it. A status reply
// (+OK) reads as a string, like a bulk string: it becomes a Bulk.
func toReply(v any) (luascript.Reply, error) {
	switch v := v.(type) {
	case nil:
		return luascript.Reply{Kind: luascript.Null}, nil
	case int64:
		return luascript.Reply{Kind: luascript.Int, Int: v}, nil
	case string:
		return luascript.Reply{Kind: luascript.Bulk, Str: v}, nil
	case error:
		return luascript.Reply{Kind: luascript.Error, Str: v.Error()}, nil
	case []any:
		out := luascript.Reply{Kind: luascript.Array, Array: make([]luascript.Reply, len(v))}
		for i, e := range v {
			var err error
			if out.Array[i], err = toReply(e); err != nil {
				return luascript.Reply{}, err
			}
		}
		return out, nil
	}
	return luascript.Reply{}, fmt.Errorf("%w: script returned %T", ErrBadReply, v)
}

// kill sends SCRIPT KILL on a connection of its own: the node's pipelines
// may be waiting behind the very script to kill. OK: a script was killed;
// NOTBUSY (none was running) is OK false; UNKILLABLE (it wrote) is an
// error.
func (n *RedisNode) kill(ctx context.Context, tag int, done quorum.Sink) {
	opts := *n.client.Options()
	opts.OnConnect, opts.PoolSize, opts.MinIdleConns = nil, 1, 0
	c := redis.NewClient(&opts)
	defer c.Close()
	err := c.ScriptKill(ctx).Err()
	r := quorum.Reply{Tag: tag, OK: err == nil}
	if err != nil && !redis.HasErrorPrefix(err, "NOTBUSY") {
		r.Err = n.wrap(err)
	}
	done.Put(r)
}
