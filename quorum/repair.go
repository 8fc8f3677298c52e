package quorum

import (
	"context"
	"sync"
	"time"
)

// Repair: nodes that drifted apart under scripts run on every node.
//
// Nodes run a script on a key in one order (turn.go), yet their states can
// still differ: a node that missed a script (paused, timed out) keeps its
// old state, and a script that reads a remaining time (Redisson's fair
// lock scores its waiters by PTTL) writes values that differ by the
// milliseconds between the nodes' runs, so the nodes later expire a
// waiter's place at different moments. Left alone, a minority node's
// state is a fault waiting for the next node failure: lose one node of the
// majority and the majority flips.
//
// So, as Dynamo-style stores do (read repair), a script run under its
// turn also returns, in the same atomic step on each node and the same
// reply (no extra round trip), each of its keys' state: the key's DUMP
// and whether it has a TTL (KeyState). Per key, the states are compared
// among the nodes that answered and are counted: a state held by a
// quorum (N/2+1 of all the nodes, not only of those that answered) is the
// majority's, and every other answering node is given it, still under the
// script's turn (before the node gets the turn back), so no script
// interleaves: OpRepair, RESTORE key pttl dump REPLACE (the majority's
// least remaining time; no TTL if it has none) or DEL when the majority
// has no key, in one atomic step guarded by the turn. A quorum's state
// is never overwritten: at most one state can have a quorum. Without a
// quorum for a key (two of three answered and differ; three states that
// differ by a few ms) nothing is repaired, and that is reported.
//
// Each key is judged on its own. With three nodes, two quorums share a
// node, so the majority states of a script's keys are, key by key, those
// of real nodes; a node repaired on some keys and not others (no majority
// for those) keeps its own state there.
//
// A node whose state for a key is unknown (the script raised an error
// after writing, or the node cannot DUMP the key: the embedded backend's
// miniredis dumps strings only) is neither counted nor repaired for it.
//
// When: once a quorum of nodes agree on every key, once every node's part
// is known, or at latest a node timeout after the first node reported its
// states (a paused node is not waited for: the nodes that answered keep
// their turns no longer than that). Repairs are counted and logged
// through Config.OnRepair.

// KeyState is one key's state on one node.
type KeyState struct {
	// Known is false when the node could not report the key (its DUMP
	// failed).
	Known bool
	// Dump is the key's DUMP payload; "" when the node has no key.
	Dump string
	// PTTL is the key's remaining time in ms: -2 no key, -1 no expiry.
	PTTL int64
}

// same reports whether two known states agree: equal DUMP, and both with
// or both without a TTL. Remaining times differ between nodes by the
// moments their runs took place, so their values are not compared.
func (k KeyState) same(o KeyState) bool {
	return k.Dump == o.Dump && (k.PTTL == -1) == (o.PTTL == -1)
}

// RepairEvent is told to Config.OnRepair: a node's keys repaired (or a
// repair that failed), or keys whose nodes disagreed with no majority.
type RepairEvent struct {
	// Node is the repaired node's index; -1 for NoMajority.
	Node int
	// Keys are the keys repaired, or the keys with no majority.
	Keys []string
	// NoMajority: the nodes that answered held different states of Keys,
	// none of them on a quorum of nodes; nothing was repaired.
	NoMajority bool
	// Err is why a repair failed (the turn was no longer the script's on
	// the node: ErrTurnLost; the node failed).
	Err error
}

// stateVote gathers the nodes' key states of one script run under its
// turn and decides, per key, the majority's state.
type stateVote struct {
	r    *Redlock
	keys []string // unique, as the nodes report them

	mu       sync.Mutex
	states   [][]KeyState // per node; nil: no states
	left     int          // nodes whose part is not known yet
	answered int
	timer    *time.Timer
	majority []*KeyState // per key, once decided: the majority's state, or nil
	decided  chan struct{}
}

func newStateVote(r *Redlock, keys []string) *stateVote {
	return &stateVote{r: r, keys: keys, states: make([][]KeyState, len(r.nodes)), left: len(r.nodes), decided: make(chan struct{})}
}

// add records node i's part: the states it reported, or nil (no run, a
// failure, an error raised, a node the restart rule does not count).
func (v *stateVote) add(i int, states []KeyState) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.left--
	if len(states) == len(v.keys) {
		v.states[i] = states
		v.answered++
	}
	switch {
	case v.majority != nil:
	case v.left == 0 || v.allAgreed():
		v.decide()
	case v.answered > 0 && v.timer == nil:
		v.timer = time.AfterFunc(v.r.timeout(0), func() {
			v.mu.Lock()
			defer v.mu.Unlock()
			if v.majority == nil {
				v.decide()
			}
		})
	}
}

// allAgreed reports whether every key has a state held by a quorum.
func (v *stateVote) allAgreed() bool {
	for k := range v.keys {
		if v.quorumState(k) == nil {
			return false
		}
	}
	return true
}

// quorumState is key k's state held by a quorum of the nodes that
// answered (the least remaining time among them), or nil.
func (v *stateVote) quorumState(k int) *KeyState {
	for i, si := range v.states {
		if si == nil || !si[k].Known {
			continue
		}
		best, count := si[k], 0
		for _, sj := range v.states[i:] {
			if sj != nil && sj[k].Known && sj[k].same(si[k]) {
				count++
				if sj[k].PTTL >= 0 && sj[k].PTTL < best.PTTL {
					best.PTTL = sj[k].PTTL
				}
			}
		}
		if count >= v.r.quorum {
			return &best
		}
	}
	return nil
}

// decide fixes the majority per key and reports the keys whose answering
// nodes differ without a majority. v.mu is held.
func (v *stateVote) decide() {
	if v.timer != nil {
		v.timer.Stop()
	}
	v.majority = make([]*KeyState, len(v.keys))
	var split []string
	for k, key := range v.keys {
		v.majority[k] = v.quorumState(k)
		if v.majority[k] == nil && v.differ(k) {
			split = append(split, key)
		}
	}
	close(v.decided)
	if len(split) > 0 {
		v.r.tellRepair(RepairEvent{Node: -1, Keys: split, NoMajority: true})
	}
}

// differ reports whether two answering nodes hold different states of
// key k.
func (v *stateVote) differ(k int) bool {
	var first *KeyState
	for _, s := range v.states {
		if s == nil || !s[k].Known {
			continue
		}
		if first == nil {
			first = &s[k]
		} else if !first.same(s[k]) {
			return true
		}
	}
	return false
}

// fixes waits for the verdict and returns the keys on which node i's
// reported states differ from the majority's, with the majority's states.
func (v *stateVote) fixes(i int, states []KeyState) (keys []string, fix []KeyState) {
	select {
	case <-v.decided:
	case <-v.r.life.Done():
		return nil, nil
	}
	for k, m := range v.majority {
		if m != nil && len(states) == len(v.keys) && states[k].Known && !states[k].same(*m) {
			keys, fix = append(keys, v.keys[k]), append(fix, *m)
		}
	}
	return keys, fix
}

// repairNode gives node i the majority's state where its own differs,
// under the turn t, and tells Config.OnRepair.
func (r *Redlock) repairNode(t *turn, i int, states []KeyState) {
	keys, fix := t.vote.fixes(i, states)
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.life, r.timeout(0))
	defer cancel()
	done := make(Replies, 1)
	r.nodes[i].Do(ctx, &Op{Kind: OpRepair, Keys: keys, Fix: fix, Turn: t.token}, i, done)
	rep := <-done
	r.health.note(i, rep.Err)
	r.tellRepair(RepairEvent{Node: i, Keys: keys, Err: rep.Err})
}

// tellRepair tells Config.OnRepair, if set.
func (r *Redlock) tellRepair(e RepairEvent) {
	if r.cfg.OnRepair != nil {
		r.cfg.OnRepair(e)
	}
}
