package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
//     verified) lost nothing: it counts at once, its holds up to the
//     node's vetted floor, whichever process it names, taken as possibly
//     from before a floor (staleHold). Not so one whose record says an
//     instance saw it restart without fsync and vetted nothing since
//     (RestartedMark: appendfsync always turned on since keeps what the
//     process had, not what it lost), nor the restart of a process this
//     instance held out, nor one whose counter is below what this
//     instance knew of the process before (the last read, the floor it
//     raised, the counters its counted replies carried or its counted
//     commits raised it to: its data is gone): they are held out as
//     below.
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
//     answered, and the node counts from then on (upstream keeps one
//     counter for every key of a node: the floor raises it). Every fence granted so far is
//     recorded on a majority of nodes; when at least N−quorum+1 of the
//     other nodes are counted and answered, one of them is in that
//     majority, so the floor is at least every fence granted before it. When
//     fewer of them are counted (a majority restarted), nobody may know
//     the last fences: the floor is then also raised to the current time in
//     microseconds, above any counter that grew by one per grant since an
//     earlier floor (and exact in a Lua number until the year 2255).
//
// A process that an instance vetted (its floor raised after its probation,
// or found new by an operator's explicit start on new nodes: see
// instance/newnodes.go) records its own run id as vetted; any instance that
// reads that record for the process it talks to counts it at once, since
// the process has kept every write since it was vetted. Beside it the node
// records its counter right after the first raise for that run id
// (Status.Floor): every instance takes a hold recorded there with a fence
// up to it as possibly from before the floor (staleHold), whichever
// instance's refused attempt left it. An instance that
// sees a node restart without verified fsync clears the record (OpFloor
// with RestartedMark), and again at each read that does not show it while
// it holds the process out, so that no start on "new" nodes can take that
// node for new while it is held out, and no instance counts the process
// at once once it is made durable.
//
// A node whose status carries the run id of another node's is that node
// under a second name (DNS, a proxy): it is not counted, so that one
// server never counts twice; when it names a server of its own again, it
// is first seen again.
//
// A node on probation still receives every write, so it holds what the
// others hold when it is counted again; the quorum stays N/2+1 of all N
// nodes, so with a majority on probation every operation gets NOQUORUM.
// Between a restart and the next status read, the node's own replies say
// it restarted: each carries the run id of the process that answered
// (Reply.Incarnation, read when its connection was opened), and one from a
// process not vetted is not counted and triggers a read at once.
//
// A reply counts only if its call was sent after the node was last
// counted again (nodeTrust.since, against the epoch the caller read before
// sending: Redlock.sentEpoch). A call sent while the node was held out may
// have run before its fence floor was raised, with the counter it kept
// after the restart: its reply, read once the node counts again, carries
// that counter, and with another node's would make a fence below one
// already granted (TestStaleReplyOfARaisedNode).

// DefaultStatusEvery is how often the nodes' status is read when
// Config.StatusEvery is zero.
const DefaultStatusEvery = time.Second

// statusTimeout bounds one status read or floor raise: far above a node's
// usual answer, so that a loaded host does not delay a node's return.
const statusTimeout = 2 * time.Second

// ErrLeaseTooLong refuses a TTL longer than Config.MaxLease.
var ErrLeaseTooLong = errors.New("TTL longer than the longest lease allowed (redlock.max_lease_ms), which bounds how long a restarted node is not counted")

// ErrNotCounted is the answer of a node that restarted and is not counted
// yet (see Config.MaxLease). Replies carry it as a *NotCountedError.
var ErrNotCounted = errors.New("restarted: not counted until every lease it may have held has expired and its fencing counters are raised")

// HeldOut is a node the restart rule does not count, and why.
type HeldOut struct {
	Node int
	// Why says what was seen: "restarted", "first seen, up 3s", or the
	// other node it is an alias of.
	Why string
	// How says why a restart counts as one that lost writes, where it is
	// not the usual "without verified fsync" ("" for that).
	How string
	// Left is how long until every lease it may have held has expired
	// (zero once that is past and its fence floor is being raised).
	Left time.Duration
	// AliasOf is the node whose server it is, under another address; -1
	// for none.
	AliasOf int
	// Clock is set when the node is held out because its clock jumped
	// (clock.go) rather than after a restart.
	Clock bool
}

// NotCountedError is the answer of a node the restart rule holds out: it
// matches ErrNotCounted and says for how long.
type NotCountedError struct{ HeldOut }

func (e *NotCountedError) Error() string {
	if e.AliasOf >= 0 || e.Clock {
		return "not counted: " + e.Why
	}
	how := e.How
	if how == "" {
		how = "without verified fsync"
	}
	if e.Left <= 0 {
		return fmt.Sprintf("not counted: %s %s: its fence floor is being raised", e.Why, how)
	}
	return fmt.Sprintf("not counted: held out for %v more (%s %s: every lease it may have held must expire first)", e.Left.Round(time.Second), e.Why, how)
}

// Is makes a NotCountedError match ErrNotCounted.
func (e *NotCountedError) Is(target error) bool { return target == ErrNotCounted }

// nodeTrust is what the restart rule knows of one node.
type nodeTrust struct {
	counted string        // the run id whose answers count; "" for none
	runID   string        // the run id of the last status read
	uptime  time.Duration // the uptime of the last status read
	durable bool          // the last status read verified fsync (Status.Durable)
	until   time.Time     // not counted before: every lease it may have held has expired
	why     string        // what was seen when it stopped counting
	how     string        // why that lost writes, where not "without verified fsync" (HeldOut.How)
	aliasOf int           // the node whose server it is under another name, plus 1; 0 for none
	since   uint64        // the trust epoch at which it was last counted again
	// start is the latest start of the process first seen, or last seen
	// restarting unless verified durable with nothing lost: a renewal
	// heals onto the node only from metaGrace after it (Redlock.healsFrom).
	start time.Time
	// raised is the node's counter when its fence floor was raised for
	// the process counted (the node records it: Status.Floor; where it
	// does not, the node's largest counter when another instance was seen
	// to vet it after a restart seen here, and 0 when first seen vetted);
	// 0 for a node counted from the start or verified durable: a hold it
	// records with a fence up to it may have been taken before the floor
	// was raised (staleHold).
	raised int64
	// top is the node's largest counter at the last status read, or
	// the floor this instance raised it to since: a restart that reads
	// less, or less than a counted reply carried or a counted commit
	// raised it to since (trust.seen), lost what the node had.
	top int64
}

// trust is the restart rule's state over every node.
type trust struct {
	mu    sync.RWMutex
	nodes []nodeTrust
	kick  chan struct{} // a status read is wanted now
	// epoch grows by one each time a node is counted again (under mu);
	// read without it by sentEpoch.
	epoch atomic.Uint64
	// seen is, by node, the largest counter that a counted reply of the
	// process counted carried (an acquire's), or that a counted commit
	// reply raised it to (the fence committed), since its last restart:
	// the grants made after the last status read (counts, commit). Reset
	// under mu, raised without it.
	seen []atomic.Int64
}

// sentEpoch is the trust epoch to read before sending a call: only the
// nodes counted since then may count its reply (counts).
func (r *Redlock) sentEpoch() uint64 {
	if r.trust == nil {
		return 0
	}
	return r.trust.epoch.Load()
}

// countAgain counts node n's answers from process runID again, with t.mu
// held.
func (t *trust) countAgain(n *nodeTrust, runID string, raised int64) {
	n.counted, n.since, n.raised = runID, t.epoch.Add(1), raised
}

// staleHold reports whether a hold that node i records with fence may
// have been taken before its fence floor was raised, while it was held
// out after a restart: an attempt refused then (NOQUORUM) whose rollback
// a retry of the same token overtook leaves such holds, with fences from
// the counter the node had after the restart. The fence is not the
// token's: its retry commits a new one (claim).
func (r *Redlock) staleHold(i int, fence int64) bool {
	if r.trust == nil {
		return false
	}
	r.trust.mu.RLock()
	defer r.trust.mu.RUnlock()
	return fence <= r.trust.nodes[i].raised
}

// startTrust reads every node's status once, so that durable and old nodes
// count from the first request, and then every StatusEvery in the
// background.
func (r *Redlock) startTrust() {
	r.trust = &trust{nodes: make([]nodeTrust, len(r.nodes)), kick: make(chan struct{}, 1), seen: make([]atomic.Int64, len(r.nodes))}
	r.checkNodes()
	r.bg.Go(r.watchNodes)
}

// counts reports whether rep, an answer of node rep.Tag to a call sent
// when the trust epoch was sent (sentEpoch, read before sending), counts
// under the restart rule: not if the node was counted again only after
// the call was sent. An answer from a process not seen by the last status
// read asks for a read at once.
func (r *Redlock) counts(rep Reply, sent uint64) bool {
	if r.clockHeld(rep.Tag) {
		return false
	}
	t := r.trust
	if t == nil {
		return true
	}
	t.mu.RLock()
	n := t.nodes[rep.Tag]
	t.mu.RUnlock()
	if rep.Incarnation != "" && rep.Incarnation == n.counted {
		if n.since > sent {
			return false
		}
		// The node's counter is at least the one it carries
		// (restarted's lost): raise seen to it.
		t.carried(rep.Tag, rep.Claim.Counter)
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

// carried notes that node i's counter, in the process counted, is at
// least c (trust.seen): one load, and at most a CAS where c is above.
func (t *trust) carried(i int, c int64) {
	for seen := &t.seen[i]; ; {
		was := seen.Load()
		if c <= was || seen.CompareAndSwap(was, c) {
			return
		}
	}
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
	done := make(Replies, len(r.nodes))
	op := &Op{Kind: OpStatus}
	for i, n := range r.nodes {
		n.Do(ctx, op, i, done)
	}
	st := make([]*Status, len(r.nodes))
	for range r.nodes {
		rep := <-done
		r.NoteClock(rep.Tag, rep.Err)
		if rep.Err == nil && rep.Status.RunID != "" {
			st[rep.Tag] = &rep.Status
		}
	}
	now := time.Now()
	var events []trustEvent
	type due struct {
		i     int
		runID string
		floor int64 // 0: vetted already, no floor to raise
		top   int64 // its largest counter at the read
	}
	var dues []due
	t := r.trust
	var marks []int // nodes seen restarting: their vetted record is cleared
	t.mu.Lock()
	for i, s := range st {
		if s == nil {
			continue // unknown: nothing changes (a restart shows in its replies)
		}
		if ev, alias := r.alias(i, st); alias {
			events = append(events, ev...)
			continue
		}
		ev, isDue := r.observe(i, *s, now)
		events = append(events, ev...)
		// Recorded at the restart, and again at each read that does not
		// show it while the process is held out: the record is best
		// effort, but what tells other instances that the process lost
		// data (TestDurableWhileHeldOutMarkLostOnce).
		if n := &t.nodes[i]; n.heldForRestart() && s.Vetted != RestartedMark && s.Vetted != s.RunID {
			marks = append(marks, i)
		}
		if isDue {
			d := due{i: i, runID: s.RunID, top: s.FenceMax}
			if s.Vetted != s.RunID {
				d.floor = r.floor(i, st, now)
			}
			dues = append(dues, d)
		}
	}
	t.mu.Unlock()
	for _, i := range marks {
		r.clearVetted(i)
	}
	for _, d := range dues {
		var at int64 // the node's counter right after the raise
		if d.floor > 0 {
			ok, c := r.raiseFloor(d.i, d.runID, d.floor)
			if !ok {
				continue // tried again at the next read
			}
			at = c
		}
		t.mu.Lock()
		n := &t.nodes[d.i]
		if n.runID == d.runID && n.counted == "" {
			// The holds from before the floor: up to the counter the node
			// recorded at the process's first raise, which may be
			// another instance's, made before this one: the holds granted
			// since are not (TestRetryThroughTheSecondRaiser). Where it
			// records none (vetted first by a build before the record),
			// up to the floor and the counter read.
			raised := at
			if raised == 0 {
				raised = max(d.floor, d.top)
			}
			t.countAgain(n, d.runID, raised)
			// The raise landed on this process: its counter is at least
			// the floor now, whether or not a read sees it before the
			// next restart (TestWipedRightAfterItsFloorHeldOut).
			n.top = max(n.top, d.floor, at)
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
			if e.counted && r.clockHeld(e.node) {
				continue // still held out for its clock: clockHoldOver tells
			}
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
	// A counter never goes back on a node that kept its data: one that
	// restarted with less than it read or its counted replies carried
	// lost it, durable or not (TestDurableRestartThatLostItsDataHeldOut,
	// TestDurableWipedBeforeItsCounterWasRead).
	lost := restarted && s.FenceMax < max(n.top, r.trust.seen[i].Load())
	if first || restarted {
		r.trust.seen[i].Store(0) // the new process's, once counted
	}
	// Nor does a restart keep more than the process before it had: one
	// held out here for a restart (counted for nothing) is vouched for by
	// nothing it reloads, whether or not its record says so
	// (TestDurableRestartOfAHeldOutProcessUnmarked). One held out only
	// because it was first seen young is first contact again: an instance
	// started after its restart would count it at once, and so does this
	// one (the -NOQUORUM reply's advice, the nodes restarted with fsync:
	// TestFirstSeenYoungThenRestartedDurableCounted).
	unvouched := restarted && n.heldForRestart()
	// Nor does it keep what the process before it lost: one this instance
	// counted while it was not verified durable may have crashed after its
	// last fsync or snapshot, a renewal or a release lost, whatever the new
	// process's configuration (TestAttackZCrashOfANonDurableProcessRestartedDurable:
	// b granted during a's renewed lease). One only held out, never
	// counted here, is first contact again (heldForRestart above).
	unsynced := restarted && n.counted != "" && !n.durable
	n.durable = s.Durable
	n.runID, n.uptime, n.top = s.RunID, s.Uptime, s.FenceMax
	// Where the process may have lost the metas that releases left on the
	// node (it is not verified durable, or it is but did lose data or
	// reloaded what a restart without fsync left), no renewal heals onto it
	// until metaGrace after its start (healsFrom). A durable one that lost
	// nothing keeps the start it had: a loss before it may still matter
	// (TestAttackX3DurableRestartKeepsTheEmptyRestartsStart). One first
	// seen takes its start, durable or not: it may have started empty and
	// been made durable since, and vetted meanwhile
	// (TestAttackX3FirstSeenDurableAfterAnEmptyRestart).
	if first || (restarted && !(s.Durable && s.Vetted != RestartedMark && !lost && !unvouched && !unsynced)) {
		n.start = now.Add(-max(s.Uptime-time.Second, 0))
	}
	var events []trustEvent
	what := whyRestarted
	if first {
		what = fmt.Sprintf("first seen, up %v", s.Uptime)
	}
	if s.Vetted == s.RunID && n.counted != s.RunID {
		// An instance vetted this very process: it has kept every write
		// since (its probation was over, or --new-nodes found it new).
		events = append(events, trustEvent{i, true, what + "; vetted for this process by a lockproxy instance (its hold-out was over, or --new-nodes found it new)"})
		// Its holds up to the node's counter when the floor was raised
		// may predate the floor, whichever instance's attempts left them:
		// a token's retry may come through any instance
		// (TestStaleHoldOfARaisedNode, TestStaleHoldRetriedThroughAnotherInstance).
		// The node records that counter for the process (Status.Floor).
		// Where it records none (raised by a build before the record),
		// a node seen restarting here takes its counter now, every hold
		// an instance may have left before the floor and more; one first
		// seen vetted takes none of its holds as stale, as before the
		// record: a hold left there before its floor can give a retry
		// through this instance the hold's old fence.
		raised := s.Floor
		if raised == 0 && !first {
			raised = s.FenceMax
		}
		r.trust.countAgain(n, s.RunID, raised)
		n.until, n.why = time.Time{}, ""
		return events, false
	}
	if first || restarted {
		n.why = what
		switch {
		case s.Durable && s.Vetted != RestartedMark && !lost && !unvouched && !unsynced:
			if n.counted == "" || restarted {
				events = append(events, trustEvent{i, true, what + "; appendfsync always verified: it lost nothing"})
			}
			// It lost nothing: its holds are as the process before it
			// left them, those from before that process's floor too
			// (TestStaleHoldKeptByADurableRestart): up to the bound this
			// instance took for that process, and to the record the node
			// keeps, whichever process it names (every hold granted since
			// is above it: the node kept its counter too).
			kept := s.Recorded
			if restarted {
				kept = max(kept, n.raised)
			}
			r.trust.countAgain(n, s.RunID, kept)
			n.until = time.Time{}
			return events, false
		default:
			// Not verified durable; or verified durable, but its record
			// says an instance saw it restart without fsync and no floor
			// was raised since (RestartedMark): appendfsync always,
			// turned on since, keeps what the process had, not what it
			// lost (TestDurableWhileHeldOutNotCountedAtOnce,
			// TestDurableRestartOfAHeldOutProcess); or its counter went
			// back.
			how := "without verified fsync"
			switch {
			case s.Durable && lost:
				how = "with a fencing counter below the last one read (appendfsync always verified, but its data was lost)"
			case s.Durable && unsynced:
				how = "after a process that was not verified durable (appendfsync always verified since: it keeps only what that process had synced)"
			case s.Durable && unvouched:
				how = "from a process held out after a restart without fsync (appendfsync always verified since)"
			case s.Durable:
				how = "after a restart without fsync that no fence floor followed (appendfsync always verified since)"
			}
			// Redis reports its uptime as the difference of two clocks
			// truncated to whole seconds (server.unixtime −
			// stat_starttime), so it can exceed the process's real uptime
			// by almost a second: one started at 10.9 s reads 1 s at
			// 11.0 s. Only uptime − 1 s is certainly no more than the real
			// uptime, and now − (uptime − 1 s) is the latest the process
			// can have started; every lease it held was granted or
			// renewed before that.
			n.how = ""
			if s.Durable {
				n.how = how // a durable node's error must not blame fsync alone
			}
			start := now.Add(-max(s.Uptime-time.Second, 0))
			n.until = start.Add(r.cfg.MaxLease + r.drift(r.cfg.MaxLease))
			if n.until.After(now) || n.counted != "" {
				events = append(events, trustEvent{i, false, fmt.Sprintf("%s %s: not counted for %v, until every lease it may have held has expired",
					what, how, max(n.until.Sub(now), 0).Round(time.Millisecond))})
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
// vetted; it reports whether the node did, and the node's counter right
// after the process's first raise, which the node records too
// (Status.Floor): where another instance raised it first, the holds
// granted since are not from before the floor
// (TestRetryOfAGrantMadeBetweenTwoRaisesOfTheSameProcess).
func (r *Redlock) raiseFloor(i int, runID string, floor int64) (bool, int64) {
	ctx, cancel := context.WithTimeout(r.life, statusTimeout)
	defer cancel()
	done := make(Replies, 1)
	r.nodes[i].Do(ctx, &Op{Kind: OpFloor, Fence: floor, Token: runID}, i, done)
	rep := <-done
	return rep.Err == nil && rep.OK && rep.Incarnation == runID, rep.Claim.Counter
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
	now := time.Now()
	untrusted := r.untrusted()
	for i := range out {
		_, held := r.clockHeldOut(i, now)
		out[i] = !held && untrusted&(1<<i) == 0
	}
	return out
}

// alias reports whether node i, by the status read st, is another node's
// server under a second name (the same run id as a node listed before it);
// with t.mu held. Such a node is not counted. When it names a server of
// its own again, it is first seen again.
func (r *Redlock) alias(i int, st []*Status) ([]trustEvent, bool) {
	n := &r.trust.nodes[i]
	for j := range i {
		if st[j] != nil && st[j].RunID == st[i].RunID {
			if n.aliasOf == j+1 {
				return nil, true
			}
			why := fmt.Sprintf("the same Redis server as %s (run_id %s): one server counts once", r.nodes[j], st[i].RunID)
			*n = nodeTrust{runID: st[i].RunID, uptime: st[i].Uptime, why: why, aliasOf: j + 1}
			return []trustEvent{{i, false, why}}, true
		}
	}
	if n.aliasOf != 0 {
		*n = nodeTrust{} // a server of its own again: first seen
	}
	return nil, false
}

// whyRestarted is nodeTrust.why for a process held out because this
// instance saw its node restart (not first seen).
const whyRestarted = "restarted"

// heldForRestart reports whether the process is held out because this
// instance saw its node restart without verified fsync (or lose data):
// its durable restart reloads nothing vouched for (unvouched), and its
// node is marked RestartedMark.
func (n *nodeTrust) heldForRestart() bool { return n.counted == "" && n.why == whyRestarted }

// RestartedMark is the vetted record of a node seen restarting without
// verified fsync: it names no process (run ids are 40 hex digits).
const RestartedMark = "restarted"

// clearVetted records on node i, seen restarting without verified fsync,
// that no process of it is vetted (OpFloor with RestartedMark, no floor),
// so that an operator's start on "new" nodes refuses it, and an instance
// that did not see the restart holds the process out even once it is
// verified durable. Best effort: this instance's hold-out does not depend
// on it, and checkNodes records it again while a read does not show it.
func (r *Redlock) clearVetted(i int) {
	ctx, cancel := context.WithTimeout(r.life, statusTimeout)
	defer cancel()
	done := make(Replies, 1)
	r.nodes[i].Do(ctx, &Op{Kind: OpFloor, Token: RestartedMark}, i, done)
	<-done
}

// HeldOut lists the nodes the restart rule does not count, with how long
// each is still held out (none when the rule is off).
func (r *Redlock) HeldOut() []HeldOut {
	now := time.Now()
	var out []HeldOut
	for i := range r.nodes {
		if h, ok := r.clockHeldOut(i, now); ok {
			out = append(out, h)
			continue
		}
		if r.trust == nil {
			continue
		}
		r.trust.mu.RLock()
		n := r.trust.nodes[i]
		r.trust.mu.RUnlock()
		if n.counted == "" {
			out = append(out, r.heldOut(i, n, now))
		}
	}
	return out
}

// heldOut describes node i, not counted, at now.
func (r *Redlock) heldOut(i int, n nodeTrust, now time.Time) HeldOut {
	why := n.why
	if why == "" {
		why = "not yet read"
	}
	return HeldOut{Node: i, Why: why, How: n.how, Left: max(n.until.Sub(now), 0), AliasOf: n.aliasOf - 1}
}

// notCounted is the error that stands for node i's answer, from process
// inc, while the rule holds it out.
func (r *Redlock) notCounted(i int, inc string) error {
	if h, ok := r.clockHeldOut(i, time.Now()); ok {
		return &NotCountedError{h}
	}
	if r.trust == nil {
		return ErrNotCounted // a clock hold-out that ended meanwhile
	}
	r.trust.mu.RLock()
	n := r.trust.nodes[i]
	r.trust.mu.RUnlock()
	switch {
	case n.counted != "" && inc == n.counted:
		return fmt.Errorf("%w: counted again only after this call was sent, which may have run before its fence floor was raised", ErrNotCounted)
	case n.counted != "":
		return fmt.Errorf("%w: answered by process %q, not the one counted (%q): restarted since the last status read", ErrNotCounted, inc, n.counted)
	}
	return &NotCountedError{r.heldOut(i, n, time.Now())}
}
