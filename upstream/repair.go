package upstream

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/quorum"
)

// Repair (quorum/repair.go) on a Redis node: a script run under its turn
// with op.State is sent wrapped by GuardStated, which appends each key's
// PTTL and DUMP to the script's reply in the same atomic step (no command
// or round trip of its own); an OpRepair runs repair.lua, guarded by the
// same turn: RESTORE ... REPLACE with the majority's DUMP and remaining
// time (raising the key's release mark, as a take does), or DEL.

// repairFor is the script and arguments of an OpRepair.
func (n *RedisNode) repairFor(op *quorum.Op) (*script, []string, []any) {
	keys := append(append(append(make([]string, 0, 3*len(op.Keys)), op.Keys...), n.turnKeys(op.Keys)...), n.releasedKeys(op.Keys)...)
	args := make([]any, 0, 1+2*len(op.Fix))
	args = append(args, op.Turn)
	for _, f := range op.Fix {
		args = append(args, strconv.FormatInt(f.PTTL, 10), f.Dump)
	}
	return repairScript, keys, args
}

// repairReply is the node's reply to an OpRepair: a refusal by the guard
// (the turn is no longer the script's) is quorum.ErrTurnLost.
func repairReply(op *quorum.Op, tag int, err error, inc string) quorum.Reply {
	r := quorum.Reply{Tag: tag, Err: err, Incarnation: inc}
	if err != nil && redis.HasErrorPrefix(err, turnRefused+op.Turn) {
		r.Err = quorum.ErrTurnLost
	}
	return r
}

// stated splits the reply of a script sent with its keys' states
// (GuardStated) into the script's own reply and the states of the op's
// unique keys (quorum.Op.State).
func stated(op *quorum.Op, v any) (any, []quorum.KeyState, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 1+2*len(op.Keys) {
		return nil, nil, fmt.Errorf("%w: a script with its keys' states returned %T of %d", ErrBadReply, v, len(a))
	}
	seen := make(map[string]bool, len(op.Keys))
	var states []quorum.KeyState
	for i, k := range op.Keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		pttl, ok := a[1+2*i].(int64)
		if !ok {
			return nil, nil, fmt.Errorf("%w: PTTL of %q is %T", ErrBadReply, k, a[1+2*i])
		}
		s := quorum.KeyState{Known: pttl != -3, PTTL: pttl}
		if d, ok := a[2+2*i].(string); ok {
			s.Dump = d
		}
		states = append(states, s)
	}
	return a[0], states, nil
}
