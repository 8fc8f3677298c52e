package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/upstream"
	"go.uber.org/zap"
)

// surveyTimeout bounds the start-up survey of one node.
const surveyTimeout = 5 * time.Second

// keyNewNodes names the flag and key of an explicit start on new nodes in
// its refusals.
const keyNewNodes = "--new-nodes (redlock.new_nodes)"

// fixHeldOut is the one-line fix for nodes held out by the restart rule.
const fixHeldOut = "run the nodes with appendonly yes and appendfsync always (counted at once), " +
	"or start lockproxy with --new-nodes if no lockproxy has used them, or lower redlock.max_lease_ms (the hold-out)"

// checkNodes surveys the redlock nodes before they are used. Two addresses
// that reach one server (the same run id) are refused: it would count
// twice toward the quorum. With redlock.new_nodes the nodes must be new,
// and are then vetted (commission).
func (in *Instance) checkNodes(nodes []*upstream.RedisNode) error {
	surveys, errs := survey(nodes, in.cfg.Redlock.NewNodes)
	if err := distinct(nodes, surveys, errs); err != nil {
		return err
	}
	in.warnRuleOff(nodes, surveys, errs)
	if !in.cfg.Redlock.NewNodes {
		in.markPristine(nodes, surveys, errs)
		return nil
	}
	if in.cfg.Redlock.MaxLeaseMS == 0 {
		in.log.Warn("--new-nodes with redlock.max_lease_ms = 0: every node counts at once anyway; the check still runs")
	}
	return in.commission(nodes, surveys, errs)
}

// survey reads every node at once; scan looks for lockproxy's keys.
func survey(nodes []*upstream.RedisNode, scan bool) ([]upstream.Survey, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), surveyTimeout)
	defer cancel()
	surveys, errs := make([]upstream.Survey, len(nodes)), make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { surveys[i], errs[i] = n.Survey(ctx, scan) })
	}
	wg.Wait()
	return surveys, errs
}

// distinct refuses two nodes that answered with the same run id.
func distinct(nodes []*upstream.RedisNode, surveys []upstream.Survey, errs []error) error {
	seen := map[string]int{}
	for i, s := range surveys {
		if errs[i] != nil {
			continue
		}
		if j, ok := seen[s.RunID]; ok {
			return &StartError{Key: "redlock.nodes", Err: fmt.Errorf("%s and %s reach the same Redis server (run_id %s): "+
				"it would count twice toward the quorum; list each server once", nodes[j], nodes[i], s.RunID)}
		}
		seen[s.RunID] = i
	}
	return nil
}

// errNotNew is the cause of every refusal of --new-nodes.
var errNotNew = errors.New("the nodes are not new")

// A node's standing for --new-nodes, from its survey.
const (
	standEmpty    = iota // holds none of lockproxy's keys
	standPristine        // this process was found empty, with all its peers, at first contact (MarkPristine)
	standVetted          // this process was vetted by an instance
	standUsed            // holds lockproxy's keys otherwise
	standDown            // did not answer
)

// standing sorts node i's survey.
func standing(s upstream.Survey, err error) int {
	switch {
	case err != nil:
		return standDown
	case s.Vetted != "" && s.Vetted == s.RunID:
		return standVetted
	case s.Vetted == upstream.PristinePrefix+s.RunID:
		return standPristine
	case len(s.Keys) == 0:
		return standEmpty
	default:
		return standUsed
	}
}

// commission checks that the nodes are new, and vets each (raises its
// fence floor to the time in µs and records its run id as vetted), so that
// every instance counts these processes at once. New means: every node
// answers, and holds none of lockproxy's keys — or is the very process
// that a lockproxy found empty, with all its peers, when it first met them
// (its refused attempts since left keys, but the process lost nothing).
// On a later start, when every node is still the process vetted, the flag
// changes nothing.
func (in *Instance) commission(nodes []*upstream.RedisNode, surveys []upstream.Survey, errs []error) error {
	var why, fresh []string
	vetted := 0
	for i, s := range surveys {
		switch standing(s, errs[i]) {
		case standDown:
			why = append(why, fmt.Sprintf("%s does not answer (%v): every node must answer to be found new", nodes[i], errs[i]))
		case standVetted:
			vetted++
		case standUsed:
			why = append(why, fmt.Sprintf("%s holds lockproxy's keys (%s): %s", nodes[i], strings.Join(s.Keys, ", "), usedWhy(s)))
		default:
			fresh = append(fresh, nodes[i].String())
		}
	}
	if vetted > 0 && len(fresh) > 0 {
		why = append(why, fmt.Sprintf("%s new while the others are in use by lockproxy: their records may hold leases it held (restarted, wiped or replaced?)",
			strings.Join(fresh, ", ")+map[bool]string{true: " is", false: " are"}[len(fresh) == 1]))
	}
	switch {
	case len(why) > 0:
		return &StartError{Key: keyNewNodes, Err: fmt.Errorf("%w: %s; start without --new-nodes: the restart rule then holds out each node that may have held leases until they have expired",
			errNotNew, strings.Join(why, "; "))}
	case vetted == len(nodes):
		in.log.Warn("--new-nodes: every node is already the process a lockproxy vetted, so the flag changes nothing; remove it: "+
			"after a node restarts, a start with it is refused", zap.Strings("nodes", in.cfg.Redlock.Nodes))
		return nil
	}
	return in.vet(nodes, surveys)
}

// usedWhy says what a node's vetted record tells of a node that holds
// lockproxy's keys and cannot be taken for new.
func usedWhy(s upstream.Survey) string {
	switch {
	case s.Vetted == quorum.RestartedMark:
		return "a lockproxy instance saw it restart without fsync and holds it out"
	case s.Vetted == upstream.CountedUnvetted:
		return "a lockproxy with redlock.max_lease_ms = 0 counted it, whatever it may have lost"
	case strings.HasPrefix(s.Vetted, upstream.PristinePrefix), s.Vetted != "":
		return "it restarted since a lockproxy first met or vetted it"
	default:
		return "a lockproxy has used it"
	}
}

// markPristine records, on the first contact of a lockproxy with nodes
// that all answer and all hold no key at all, that each of
// these processes was found empty: a later start with --new-nodes may
// take them for new as long as they are the same processes, although
// attempts refused meanwhile (the restart rule holds such nodes out) left
// keys on them.
func (in *Instance) markPristine(nodes []*upstream.RedisNode, surveys []upstream.Survey, errs []error) {
	if in.cfg.Redlock.MaxLeaseMS == 0 {
		in.unmarkPristine(nodes)
		return
	}
	for i, s := range surveys {
		if errs[i] != nil || !s.Empty {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), surveyTimeout)
	defer cancel()
	for i, n := range nodes {
		if _, err := n.MarkPristine(ctx, surveys[i].RunID); err != nil {
			in.log.Debug("recording a new node as found empty", zap.String("node", n.String()), zap.Error(err))
		}
	}
}

// vet raises every node's fence floor to the time in µs — above any
// fence an earlier life of these nodes can have granted, should they not
// be as new as they look — and records its run id as vetted.
func (in *Instance) vet(nodes []*upstream.RedisNode, surveys []upstream.Survey) error {
	ctx, cancel := context.WithTimeout(context.Background(), surveyTimeout)
	defer cancel()
	floor := time.Now().UnixMicro()
	for i, n := range nodes {
		done := make(quorum.Replies, 1)
		n.Do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: floor, Token: surveys[i].RunID}, i, done)
		rep := <-done
		if rep.Err != nil || !rep.OK || rep.Incarnation != surveys[i].RunID {
			return &StartError{Key: keyNewNodes, Err: fmt.Errorf("%s: could not record it as vetted (%v): it restarted or failed meanwhile", n, rep.Err)}
		}
	}
	in.log.Warn("--new-nodes: the nodes were found new (reachable, distinct, none holds lockproxy's keys) and are counted at once; "+
		"remove the flag for later starts", zap.Strings("nodes", in.cfg.Redlock.Nodes), zap.Int64("fence_floor", floor))
	return nil
}

// warnRuleOff warns, with redlock.max_lease_ms = 0, of the nodes not
// verified to fsync every write: a restart of one can grant a lock twice.
// INFO nodes and /readyz repeat it.
func (in *Instance) warnRuleOff(nodes []*upstream.RedisNode, surveys []upstream.Survey, errs []error) {
	if in.cfg.Redlock.MaxLeaseMS > 0 {
		return
	}
	var unsafe []string
	for i, s := range surveys {
		if errs[i] != nil || !s.Durable {
			unsafe = append(unsafe, nodes[i].String())
		}
	}
	if len(unsafe) == 0 {
		return
	}
	in.nodeSet.ruleOff = fmt.Sprintf("redlock.max_lease_ms = 0 turns the restart rule off, and %s not verified to run with appendonly yes "+
		"and appendfsync always: a restart of one can grant a lock twice and reuse fences; set max_lease_ms, or make the nodes durable",
		strings.Join(unsafe, ", ")+map[bool]string{true: " is", false: " are"}[len(unsafe) == 1])
	in.log.Warn(in.nodeSet.ruleOff, zap.Strings("nodes", unsafe))
}

// unmarkPristine: an instance with the restart rule off counts every node
// whatever it lost, so no node may be taken for new on the strength of
// having been found empty before (markPristine).
func (in *Instance) unmarkPristine(nodes []*upstream.RedisNode) {
	ctx, cancel := context.WithTimeout(context.Background(), surveyTimeout)
	defer cancel()
	for _, n := range nodes {
		if err := n.UnmarkPristine(ctx); err != nil {
			in.log.Warn("could not clear a node's record of being found empty; --new-nodes may take it for new",
				zap.String("node", n.String()), zap.Error(err))
		}
	}
}
