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
	surveys, errs := survey(nodes)
	if err := distinct(nodes, surveys, errs); err != nil {
		return err
	}
	in.warnRuleOff(nodes, surveys, errs)
	if !in.cfg.Redlock.NewNodes {
		return nil
	}
	return in.commission(nodes, surveys, errs)
}

// survey reads every node at once.
func survey(nodes []*upstream.RedisNode) ([]upstream.Survey, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), surveyTimeout)
	defer cancel()
	surveys, errs := make([]upstream.Survey, len(nodes)), make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { surveys[i], errs[i] = n.Survey(ctx) })
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

// commission checks that the nodes are new, and vets each (raises its
// fence floor to the time in µs and records its run id as vetted), so that
// every instance counts these processes at once. On a later start, when
// every node is still the process vetted, the flag changes nothing.
func (in *Instance) commission(nodes []*upstream.RedisNode, surveys []upstream.Survey, errs []error) error {
	var why, empty []string
	inUse := 0
	for i, s := range surveys {
		switch {
		case errs[i] != nil:
			why = append(why, fmt.Sprintf("%s does not answer (%v): every node must answer to be found new", nodes[i], errs[i]))
		case s.Vetted != "" && s.Vetted == s.RunID:
			inUse++
		case len(s.Keys) > 0:
			why = append(why, fmt.Sprintf("%s holds lockproxy's keys (%s): a lockproxy has used it%s", nodes[i], strings.Join(s.Keys, ", "), restartedSince(s)))
		default:
			empty = append(empty, nodes[i].String())
		}
	}
	if inUse > 0 && len(empty) > 0 {
		why = append(why, fmt.Sprintf("%s empty while the others are in use by lockproxy: its peers' records may hold leases it held (restarted, wiped or replaced?)",
			strings.Join(empty, ", ")+map[bool]string{true: " is", false: " are"}[len(empty) == 1]))
	}
	switch {
	case len(why) > 0:
		return &StartError{Key: keyNewNodes, Err: fmt.Errorf("%w: %s; start without --new-nodes: the restart rule then holds out each node that may have held leases until they have expired",
			errNotNew, strings.Join(why, "; "))}
	case inUse == len(nodes):
		in.log.Warn("--new-nodes: every node is already the process a lockproxy vetted, so the flag changes nothing; remove it: "+
			"after a node restarts, a start with it is refused", zap.Strings("nodes", in.cfg.Redlock.Nodes))
		return nil
	}
	return in.vet(nodes, surveys)
}

// restartedSince says that a node whose vetted record names another
// process, or was cleared, restarted since it was vetted.
func restartedSince(s upstream.Survey) string {
	if s.Vetted != s.RunID {
		return ", and is not the process a lockproxy vetted (it restarted since, or another instance holds it out after a restart)"
	}
	return ""
}

// vet raises every node's fence floor to the time in µs — above any
// fence an earlier life of these nodes can have granted, should they not
// be as new as they look — and records its run id as vetted.
func (in *Instance) vet(nodes []*upstream.RedisNode, surveys []upstream.Survey) error {
	ctx, cancel := context.WithTimeout(context.Background(), surveyTimeout)
	defer cancel()
	floor := time.Now().UnixMicro()
	for i, n := range nodes {
		done := make(chan quorum.Reply, 1)
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
