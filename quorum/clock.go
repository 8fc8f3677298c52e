package quorum

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// A node whose wall clock jumped.
//
// Redis expires keys by its wall clock, so a node whose clock stepped
// forward has dropped its locks early, and one that stepped back keeps
// them late (and reports an uptime gone back). The node layer reads each
// node's time with every pipeline it sends and answers the calls of a
// pipeline whose time shows a jump with a *ClockJumpError
// (upstream/clock.go): those answers count toward nothing, like a silent
// node's. Then the Redlock:
//
//   - holds the node out, whichever way it jumped, as after a restart
//     without fsync: its answers are not counted until every lease it may
//     have held has run out on the other nodes' clocks — MaxLease plus its
//     drift when the restart rule is on; otherwise the longest lease this
//     instance granted or renewed so far (other instances' leases cannot
//     be known then), at least the step for a step forward
//     (ClockJumpError.Most: the node dropped each key at most that much
//     early, whoever granted it), and for a node found off this
//     instance's clock at first contact (ClockJumpError.First) at least
//     that offset, plus the skew allowed when ahead (it may have been that
//     far behind before; a new instance has granted nothing), plus its
//     drift. A hold only grows: a second jump while held out (the clock
//     set right again) does not end the first hold early;
//   - tells the holders of the locks it granted whose majority included
//     the node (Config.OnLost, reason LostClockJumped) when the nodes that
//     still vouch for the lock — those that took or renewed it for the
//     holder, not held out — are fewer than a majority;
//   - reports the jump (Config.OnClockJump) and the change in counting
//     (Config.OnTrust).
//
// Which nodes vouch for a lock is what this instance saw: the nodes whose
// answers completed the grant's or its last renewal's majority (a node
// that answered after the outcome was decided is not among them, so a
// holder may be told a little early, never late).

// LostClockJumped is the reason a holder is told its lock was lost when a
// node it relied on jumped.
const LostClockJumped = engine.LostClockJumped

// clockHolds is the Redlock's state for nodes whose clock jumped.
type clockHolds struct {
	mu      sync.Mutex
	until   []time.Time // node i is not counted before until[i]
	why     []string
	longest time.Duration       // the longest lease granted or renewed here
	vouch   map[grantID]vouched // locks granted here, by the nodes that hold them
	sweepAt int                 // len(vouch) at which expired entries are dropped
	timers  map[int]*time.Timer // a hold's end, told to OnTrust
	// noted is the last jump noted for each node: every call of the
	// pipeline that showed it carries the same error, and each may be
	// noted (a node's observer, the fan-out, the probe), once counted.
	noted []*ClockJumpError
	// dropped is when node i was last seen to have stepped forward (or
	// to be ahead at first contact): it dropped its keys early, the metas
	// releases left there too, as a restart without fsync loses them, and
	// no renewal heals onto it until metaGrace after that (healsFrom).
	dropped []time.Time
}

// vouched is the nodes that took or renewed a lock, and until when the
// lock is valid.
type vouched struct {
	nodes uint64
	until int64 // Unix nanoseconds, by this process's clock
}

const minSweep = 1024

func newClockHolds(n int) *clockHolds {
	return &clockHolds{until: make([]time.Time, n), why: make([]string, n), vouch: map[grantID]vouched{},
		sweepAt: minSweep, timers: map[int]*time.Timer{}, noted: make([]*ClockJumpError, n), dropped: make([]time.Time, n)}
}

// clockHeld reports whether node i is held out after a clock jump.
func (r *Redlock) clockHeld(i int) bool {
	c := r.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(c.until[i])
}

// clockHeldOut describes node i while it is held out after a clock jump.
func (r *Redlock) clockHeldOut(i int, now time.Time) (HeldOut, bool) {
	c := r.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if !now.Before(c.until[i]) {
		return HeldOut{}, false
	}
	return HeldOut{Node: i, Why: c.why[i], Left: c.until[i].Sub(now), AliasOf: -1, Clock: true}, true
}

// NoteClock notes node i's answer err: when it says the node's clock
// jumped, the node is held out and the holders of locks it vouched for
// are told. Anything else is ignored, and so is a jump already noted (the
// same error again). The fan-outs call it for every answer they read; the
// instance, for every answer of a node (RedisOptions.Observe), since the
// pipeline that shows a jump may carry only answers that arrive after
// their fan-out was decided, which nobody reads: the next pipeline takes
// the jumped clock as its baseline and shows nothing.
func (r *Redlock) NoteClock(i int, err error) {
	if tell := r.HoldClock(i, err); tell != nil {
		tell()
	}
}

// HoldClock is NoteClock in two steps: it holds node i out at once, on
// the caller's goroutine, and returns the telling (OnClockJump, OnTrust,
// OnLost) for the caller to run where it may wait; nil when there is
// nothing to tell. A node's observer, which runs on the goroutine that
// delivers the node's replies, holds the node out before that goroutine
// reads the node's next pipeline: that pipeline, in step with the jumped
// clock, shows no jump, and its votes must not count before the hold.
func (r *Redlock) HoldClock(i int, err error) (tell func()) {
	var j *ClockJumpError
	if i < 0 || i >= len(r.nodes) || !errors.As(err, &j) {
		return nil
	}
	hold := r.cfg.MaxLease
	untrusted := r.untrusted() // read before c.mu: Counted takes the two the other way
	c := r.clock
	c.mu.Lock()
	if c.noted[i] == j {
		c.mu.Unlock()
		return nil
	}
	c.noted[i] = j
	if hold <= 0 {
		hold = c.longest
		if j.First {
			// A new instance has granted nothing yet: the longest lease
			// is none. A node Jump ahead of this instance's clock at
			// first contact was in step before, but for the skew allowed
			// (Allowance) the other way: it dropped a key at most Jump +
			// Allowance early, so every lock it dropped early has run out
			// that long from now. One behind keeps keys late.
			off := j.Jump.Abs()
			if j.Jump > 0 {
				off += j.Allowance
			}
			hold = max(hold, off)
		}
		// A node that stepped forward by at most Most dropped each key at
		// most that much early: every lock it dropped, whichever instance
		// granted it, has run out Most after the step.
		hold = max(hold, j.Most)
	}
	hold += r.drift(hold)
	now := time.Now()
	// A hold only grows: a later jump (the clock set right again, as NTP
	// does once it notices) does not end the one before it early, with
	// the restart rule off, where the hold is this jump's own.
	hold = max(hold, c.until[i].Sub(now))
	c.until[i] = now.Add(hold)
	if j.Jump > 0 {
		// The hold can be shorter than the metas' grace
		// (TestAttackX3ClockJumpDropsTheReleasesMeta).
		c.dropped[i] = now
	}
	why := fmt.Sprintf("node clock jumped %s (more than the drift allowance): not counted for %v, until every lease it may have held has run out", signed(j.Jump), hold.Round(time.Millisecond))
	if j.First && j.Silence > 0 {
		why = fmt.Sprintf("node clock is %s off this instance's after %v without a reply (more than redlock.clock_skew_ms: taken as a jump while it was silent; sync the clocks): not counted for %v, until every lease it may have held has run out", signed(j.Jump), j.Silence.Round(time.Second), hold.Round(time.Millisecond))
	} else if j.First {
		why = fmt.Sprintf("node clock is %s off this instance's at first contact (more than redlock.clock_skew_ms: taken as a jump before this instance started; sync the clocks): not counted for %v, until every lease it may have held has run out", signed(j.Jump), hold.Round(time.Millisecond))
	}
	c.why[i] = why
	lost := r.unvouchLocked(i, now, untrusted)
	if t := c.timers[i]; t != nil {
		t.Stop()
	}
	c.timers[i] = time.AfterFunc(hold, func() { r.clockHoldOver(i) })
	c.mu.Unlock()
	return func() {
		if r.cfg.OnClockJump != nil {
			r.cfg.OnClockJump(i, j.Jump, hold)
		}
		if r.cfg.OnTrust != nil {
			r.cfg.OnTrust(i, false, why)
		}
		if r.cfg.OnLost != nil {
			for _, id := range lost {
				r.cfg.OnLost(id.key, id.token, LostClockJumped)
			}
		}
	}
}

// clockHoldOver tells OnTrust that node i counts again, unless it jumped
// again meanwhile or the restart rule holds it out.
func (r *Redlock) clockHoldOver(i int) {
	if r.life.Err() != nil || r.clockHeld(i) || r.cfg.OnTrust == nil {
		return
	}
	if r.trust != nil && !r.Counted()[i] {
		return
	}
	r.cfg.OnTrust(i, true, "its clock-jump hold-out is over: every lease it may have held has run out")
}

// untrusted is the nodes the restart rule does not count (bit i: node i).
func (r *Redlock) untrusted() uint64 {
	var out uint64
	if r.trust == nil {
		return 0
	}
	r.trust.mu.RLock()
	defer r.trust.mu.RUnlock()
	for j, n := range r.trust.nodes {
		if n.counted == "" {
			out |= 1 << j
		}
	}
	return out
}

// unvouchLocked takes node i out of every lock it vouched for, and returns
// the locks that fewer than a majority of counted nodes still vouch for
// (they are forgotten); untrusted is the nodes the restart rule holds out;
// c.mu is held.
func (r *Redlock) unvouchLocked(i int, now time.Time, untrusted uint64) []grantID {
	c := r.clock
	held := untrusted
	for j, u := range c.until {
		if now.Before(u) {
			held |= 1 << j
		}
	}
	var lost []grantID
	for id, v := range c.vouch {
		switch {
		case now.UnixNano() >= v.until:
			delete(c.vouch, id)
		case v.nodes&(1<<i) != 0:
			if popcount(v.nodes&^held) < r.quorum {
				lost = append(lost, id)
				delete(c.vouch, id)
			}
		}
	}
	return lost
}

// vouch records that nodes (bit i: node i) hold key for token, valid for
// validity: a grant or renewal made here.
func (r *Redlock) vouch(key, token string, ttl time.Duration, nodes uint64, validity time.Duration) {
	c := r.clock
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.longest = max(c.longest, ttl, validity)
	c.vouch[grantID{key, token}] = vouched{nodes: nodes, until: now.Add(validity).UnixNano()}
	if len(c.vouch) >= c.sweepAt {
		for id, v := range c.vouch {
			if now.UnixNano() >= v.until {
				delete(c.vouch, id)
			}
		}
		c.sweepAt = max(minSweep, 2*len(c.vouch))
	}
}

// unvouch forgets key's lock for token: released.
func (r *Redlock) unvouch(key, token string) {
	c := r.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.vouch, grantID{key, token})
}

// stopClock stops the hold-outs' timers (Close).
func (r *Redlock) stopClock() {
	c := r.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		t.Stop()
	}
}
