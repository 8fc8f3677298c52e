package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Redlock's restart rule, enforced rather than left to operators.
//
// A node that restarts without fsync forgets the leases it held and its
// fencing counters. Counted at once, it can complete a majority for a
// second holder of a lease that only it and a minority still carried, and
// hand out a fence lower than one already granted. So, with
// Config.MaxLease set, the Redlock reads every node's run id, uptime and
// durability (OpStatus) every StatusEvery, and counts a node's answers
// toward no grant, renewal, release or inspection — its replies become
// ErrNotCounted, as if it had not answered — unless they come from the
// process it vetted:
//
//   - A node whose run id changed or whose uptime went back restarted. So
//     did, for all this instance can know, a node first seen with an uptime
//     shorter than MaxLease: lockproxy may have started after it.
//   - A restarted node verified durable (appendonly yes, appendfsync
//     always, read with CONFIG GET; a renamed or disabled CONFIG is not
//     verified) lost nothing: it counts at once.
//   - Any other is not counted until MaxLease, plus drift, after its start
//     (now − (uptime − 1 s), the latest start that Redis's uptime allows:
//     a difference of two clocks truncated to seconds, it can read up to
//     almost a second more than the real uptime): every lease it can have held was granted or renewed before
//     it crashed, so it has expired by then, whichever instance granted it,
//     since no instance grants or renews a longer lease (Acquire and Extend
//     refuse one with ErrLeaseTooLong).
//   - Then, unless another instance already did it for this process (the
//     node records the run id it was vetted for), its fence floor is
//     raised (OpFloor) to the largest counter held by any node that
//     answered, and the node counts from then on. The acquire script
//     counts from max(key counter, floor). Every fence granted so far is
//     recorded on a majority of nodes; when at least N−quorum+1 of the
//     other nodes are counted and answered, one of them is in that
//     majority, so the floor is at least every fence granted before it. When
//     fewer of them are counted (a majority restarted), nobody may know
//     the last fences: the floor is then also raised to the current time in
//     microseconds, above any counter that grew by one per grant since an
//     earlier floor (and exact in a Lua number until the year 2255).
//
// A node on probation still receives every write, so it holds what the
// others hold when it is counted again; the quorum stays N/2+1 of all N
// nodes, so with a majority on probation every operation gets NOQUORUM.
// Between a restart and the next status read, the node's own replies say
// it restarted: each carries the run id of the process that answered
// (Reply.Incarnation, read when its connection was opened), and one from a
// process not vetted is not counted and triggers a read at once.

// DefaultStatusEvery is how often the nodes' status is read when
// Config.StatusEvery is zero.
const DefaultStatusEvery = time.Second

// statusTimeout bounds one status read or floor raise: far above a node's
// usual answer, so that a loaded host does not delay a node's return.
const statusTimeout = 2 * time.Second

// ErrLeaseTooLong refuses a TTL longer than Config.MaxLease.
var ErrLeaseTooLong = errors.New("TTL longer than the longest lease allowed (redlock.max_lease_ms), which bounds how long a restarted node is not counted")

// ErrNotCounted is the answer of a node that restarted and is not counted
// yet (see Config.MaxLease).
var ErrNotCounted = errors.New("restarted: not counted until every lease it may have held has expired and its fencing counters are raised")

// nodeTrust is what the restart rule knows of one node.
type nodeTrust struct {
	counted string        // the run id whose answers count; "" for none
	runID   string        // the run id of the last status read
	uptime  time.Duration // the uptime of the last status read
	until   time.Time     // not counted before: every lease it may have held has expired
}

// trust is the restart rule's state over every node.
type trust struct {
	mu    sync.RWMutex
	nodes []nodeTrust
	kick  chan struct{} // a status read is wanted now
}

// startTrust reads every node's status once, so that durable and old nodes
// count from the first request, and then every StatusEvery in the
// background.
func (r *Redlock) startTrust() {
	r.trust = &trust{nodes: make([]nodeTrust, len(r.nodes)), kick: make(chan struct{}, 1)}
	r.checkNodes()
	r.bg.Go(r.watchNodes)
}

// counts reports whether rep, an answer of node rep.Tag, counts under the
// restart rule. An answer from a process not seen by the last status read
// asks for a read at once.
func (r *Redlock) counts(rep Reply) bool {
	t := r.trust
	if t == nil {
		return true
	}
	t.mu.RLock()
	n := t.nodes[rep.Tag]
	t.mu.RUnlock()
	if rep.Incarnation != "" && rep.Incarnation == n.counted {
		return true
	}
	if rep.Incarnation != n.runID {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
	return false
}

// watchNodes reads the nodes' status every StatusEvery, or at once when
// asked, until Close.
func (r *Redlock) watchNodes() {
	every := r.cfg.StatusEvery
	if every <= 0 {
		every = DefaultStatusEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-r.life.Done():
			return
		case <-tick.C:
		case <-r.trust.kick:
		}
		r.checkNodes()
	}
}

// trustEvent is a change in whether a node counts, told to Config.OnTrust.
type trustEvent struct {
	node    int
	counted bool
	why     string
}

// checkNodes reads every node's status, notes restarts, and counts again
// the nodes whose probation is over once their fence floor is raised.
func (r *Redlock) checkNodes() {
	ctx, cancel := context.WithTimeout(r.life, statusTimeout)
	defer cancel()
	done := make(chan Reply, len(r.nodes))
	op := &Op{Kind: OpStatus}
	for i, n := range r.nodes {
		n.Do(ctx, op, i, done)
	}
	st := make([]*Status, len(r.nodes))
	for range r.nodes {
		if rep := <-done; rep.Err == nil && rep.Status.RunID != "" {
			st[rep.Tag] = &rep.Status
		}
	}
	now := time.Now()
	var events []trustEvent
	type due struct {
		i     int
		runID string
		floor int64 // 0: vetted already, no floor to raise
	}
	var dues []due
	t := r.trust
	t.mu.Lock()
	for i, s := range st {
		if s == nil {
			continue // unknown: nothing changes (a restart shows in its replies)
		}
		ev, isDue := r.observe(i, *s, now)
		events = append(events, ev...)
		if isDue {
			d := due{i: i, runID: s.RunID}
			if s.Vetted != s.RunID {
				d.floor = r.floor(i, st, now)
			}
			dues = append(dues, d)
		}
	}
	t.mu.Unlock()
	for _, d := range dues {
		if d.floor > 0 && !r.raiseFloor(d.i, d.runID, d.floor) {
			continue // tried again at the next read
		}
		t.mu.Lock()
		n := &t.nodes[d.i]
		if n.runID == d.runID && n.counted == "" {
			n.counted = d.runID
			why := "every lease it may have held has expired"
			if d.floor > 0 {
				why += fmt.Sprintf("; fence floor raised to %d", d.floor)
			}
			events = append(events, trustEvent{d.i, true, why})
		}
		t.mu.Unlock()
	}
	if r.cfg.OnTrust != nil {
		for _, e := range events {
			r.cfg.OnTrust(e.node, e.counted, e.why)
		}
	}
}

// observe notes node i's status s, read at now, with t.mu held. It
// returns the changes in whether the node counts, and whether its
// probation is over while it is not counted.
func (r *Redlock) observe(i int, s Status, now time.Time) ([]trustEvent, bool) {
	n := &r.trust.nodes[i]
	first := n.runID == ""
	restarted := !first && (s.RunID != n.runID || s.Uptime < n.uptime)
	n.runID, n.uptime = s.RunID, s.Uptime
	var events []trustEvent
	if first || restarted {
		what := "restarted"
		if first {
			what = fmt.Sprintf("first seen, up %v", s.Uptime)
		}
		switch {
		case s.Durable:
			if n.counted == "" || restarted {
				events = append(events, trustEvent{i, true, what + "; appendfsync always verified: it lost nothing"})
			}
			n.counted, n.until = s.RunID, time.Time{}
			return events, false
		default:
			// Redis reports its uptime as the difference of two clocks
			// truncated to whole seconds (server.unixtime −
			// stat_starttime), so it can exceed the process's real uptime
			// by almost a second: one started at 10.9 s reads 1 s at
			// 11.0 s. Only uptime − 1 s is certainly no more than the real
			// uptime, and now − (uptime − 1 s) is the latest the process
			// can have started; every lease it held was granted or
			// renewed before that.
			start := now.Add(-max(s.Uptime-time.Second, 0))
			n.until = start.Add(r.cfg.MaxLease + r.drift(r.cfg.MaxLease))
			if n.until.After(now) || n.counted != "" {
				events = append(events, trustEvent{i, false, fmt.Sprintf("%s without verified fsync: not counted for %v, until every lease it may have held has expired",
					what, max(n.until.Sub(now), 0).Round(time.Millisecond))})
			}
			n.counted = ""
		}
	}
	return events, n.counted == "" && !now.Before(n.until)
}

// floor is the fence floor for node i, given the status read st, with
// t.mu held: the largest counter any node reported, and, unless at least
// N−quorum+1 of the other nodes are counted and answered, the current
// time in microseconds.
func (r *Redlock) floor(i int, st []*Status, now time.Time) int64 {
	var top int64
	intact := 0
	for j, s := range st {
		if s == nil {
			continue
		}
		top = max(top, s.FenceMax)
		if c := r.trust.nodes[j].counted; j != i && c != "" && c == s.RunID {
			intact++
		}
	}
	if intact < len(r.nodes)-r.quorum+1 {
		top = max(top, now.UnixMicro())
	}
	return max(top, 1)
}

// raiseFloor raises node i's fence floor to floor and records runID as
// vetted; it reports whether the node did.
func (r *Redlock) raiseFloor(i int, runID string, floor int64) bool {
	ctx, cancel := context.WithTimeout(r.life, statusTimeout)
	defer cancel()
	done := make(chan Reply, 1)
	r.nodes[i].Do(ctx, &Op{Kind: OpFloor, Fence: floor, Token: runID}, i, done)
	rep := <-done
	return rep.Err == nil && rep.OK && rep.Incarnation == runID
}

// checkLease refuses a TTL the restart rule cannot cover.
func (r *Redlock) checkLease(ttl time.Duration) error {
	if r.cfg.MaxLease > 0 && ttl > r.cfg.MaxLease {
		return fmt.Errorf("%w: %v > %v", ErrLeaseTooLong, ttl, r.cfg.MaxLease)
	}
	return nil
}

// Counted reports, for each node, whether the restart rule counts its
// answers (all true when the rule is off).
func (r *Redlock) Counted() []bool {
	out := make([]bool, len(r.nodes))
	if r.trust == nil {
		for i := range out {
			out[i] = true
		}
		return out
	}
	r.trust.mu.RLock()
	defer r.trust.mu.RUnlock()
	for i, n := range r.trust.nodes {
		out[i] = n.counted != ""
	}
	return out
}
