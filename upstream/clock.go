package upstream

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/quorum"
)

// A node's wall clock, watched from the replies it sends anyway.
//
// Redis expires keys by its wall clock: a node whose clock steps forward
// drops its locks early, one that steps back keeps them late. Every
// pipeline to a node (the scripts of a batch, a status read, a health
// probe) ends with one TIME, which costs no round trip. The node's time T
// was read at some moment between the pipeline's send and the arrival of
// its replies, so its offset against this process's monotonic clock lies
// within [T − received, T − sent]: an interval as wide as the round trip.
// A clock that only drifts moves that offset by at most DriftFactor per
// unit of time (redlock.drift_factor, the allowance every lease's validity
// already subtracts), so the node keeps the tightest bounds its replies
// give — each reply's interval, widened by DriftFactor × the time since it
// was sent, intersected with the next — and a slow reply does not loosen
// what a fast one established. When a new interval lies wholly beyond
// those bounds widened by DriftFixed more (redlock.drift_fixed_ms), the
// clock jumped, forward or back: every call of that pipeline is answered
// with a *quorum.ClockJumpError, so that its votes count toward nothing,
// and the quorum layer holds the node out (quorum/clock.go), in the
// observer of the first call delivered with it. Until then every reading
// of the node's clock carries that jump (the oldest not yet delivered,
// when a second one came meanwhile): the next reply, in step with the
// jumped clock, shows nothing, and may be read on another goroutine (a
// status read and the pipeline's reader) first. The smallest
// jump seen is thus DriftFixed plus the drift since the fastest recent
// reply plus that reply's round trip (well under a millisecond on a
// quiet LAN); a smaller one stays within what the validity subtracts only
// when it is below the lease's drift allowance.
//
// The first reply a node sends this process is the baseline, checked
// against this process's own wall clock: a jump before this instance
// started, which another instance (one with a baseline) holds the node
// out for, shows as a node clock far from this one's. Where the two differ
// by more than the allowed skew (redlock.clock_skew_ms) beyond that
// reply's round trip, the first reply is answered as a jump too, so this
// instance holds the node out as the others do. Within it, the clock it
// first sees is taken as right, and checked from the next reply on —
// within a second for an idle node (the health probe), at the next batch
// for a busy one. A jump between two replies is seen at the second.
// After a silence long enough that the drift allowance since the last
// reply reaches the allowed skew (100 s at drift_factor 1%: a node down
// or cut off that long), a jump of that size no longer shows between
// the two replies; a node that was in step with this process's clock
// and comes back beyond the skew is then answered as at a first reply.
// The allowance stops growing there: a step of more than the skew still
// shows between the two replies, also for a node off this process's
// clock from its first reply.

// monoBase anchors this process's monotonic readings.
var monoBase = time.Now()

// mono is the monotonic time since monoBase.
func mono() time.Duration { return time.Since(monoBase) }

// nodeClock is what one node's replies said of its clock.
type nodeClock struct {
	mu          sync.Mutex
	factor      float64
	fixed       time.Duration
	skew        time.Duration        // RedisOptions.ClockSkew
	anchor      func() time.Duration // this process's wall time − monotonic time, now; nil: wallAnchor (a test sets it)
	known       bool
	lo, hi      time.Duration // the offset's bounds (node time − monotonic time) at the last reply
	at          time.Duration // monotonic time the last reply's pipeline was sent
	jumps       uint64
	lastJump    time.Duration
	lastJumpAge time.Time
	// unheld is the jumps returned and not yet delivered (delivered) with
	// a call, oldest first: its observer holds the node out. Every reading
	// meanwhile returns the oldest of them, as the readings after a jump,
	// in step with the jumped clock, show nothing: a status read (on
	// go-redis's pool) and the pipeline's reader note the clock on two
	// goroutines. A second jump (the clock set right again) does not
	// replace the first: that one's hold may be the longer.
	unheld []error
}

// drift is the drift a clock that does not jump may show over elapsed.
func (c *nodeClock) drift(elapsed time.Duration) time.Duration {
	return time.Duration(float64(max(elapsed, 0)) * c.factor)
}

// note checks the node time read by TIME in a pipeline sent at sent and
// answered at got (monotonic times). It returns the jump when the offset
// moved by more than the drift allowance, and nil otherwise (also when
// the reply carries no time).
func (c *nodeClock) note(cmd *redis.TimeCmd, sent, got time.Duration) error {
	if cmd == nil || cmd.Err() != nil {
		return nil
	}
	return c.noteAt(cmd.Val(), sent, got)
}

// noteAt is note of the node time now; a zero now is no reading. While a
// jump is not yet delivered (unheld), the oldest such is returned.
func (c *nodeClock) noteAt(now time.Time, sent, got time.Duration) error {
	if now.IsZero() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.compare(now, sent, got); err != nil {
		c.unheld = append(c.unheld, err)
	}
	if len(c.unheld) > 0 {
		return c.unheld[0]
	}
	return nil
}

// delivered notes that a call answered with err, noteAt's, was delivered
// to its observer: that jump is no longer returned for readings after it.
func (c *nodeClock) delivered(err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.unheld {
		if e == err {
			c.unheld = append(c.unheld[:i], c.unheld[i+1:]...)
			break
		}
	}
	if len(c.unheld) == 0 {
		c.unheld = nil
	}
}

// compare checks the node time now, read between sent and got, against
// what earlier replies said (with c.mu held): noteAt.
func (c *nodeClock) compare(now time.Time, sent, got time.Duration) error {
	t := time.Duration(now.UnixNano())
	lo, hi := t-got, t-sent
	if !c.known {
		c.known, c.lo, c.hi, c.at = true, lo, hi, sent // the baseline
		off := c.skewed(lo, hi)
		if off == 0 {
			return nil
		}
		c.jumps++
		c.lastJump, c.lastJumpAge = off, time.Now()
		return &quorum.ClockJumpError{Jump: off, Allowance: c.skew, First: true}
	}
	silence := got - c.at
	d := c.drift(silence)
	if c.skew > 0 {
		// Clocks synced within the skew do not move further apart, however
		// long the silence: a node off from its first reply (which the
		// check below leaves alone) is still seen stepping by more.
		d = min(d, c.skew)
	}
	wasLo, wasHi := c.lo-d, c.hi+d
	var jump, most time.Duration
	switch {
	case d+c.fixed >= c.skew && c.skewed(c.lo, c.hi) == 0 && c.skewed(lo, hi) != 0:
		// After a silence long enough that the drift allowance hides a
		// jump of the allowed skew, a node that was in step with this
		// process and no longer is is checked as at a first reply.
		off := c.skewed(lo, hi)
		c.lo, c.hi, c.at = lo, hi, sent // the new baseline
		c.jumps++
		c.lastJump, c.lastJumpAge = off, time.Now()
		return &quorum.ClockJumpError{Jump: off, Allowance: c.skew, First: true, Silence: silence}
	case lo > wasHi+c.fixed:
		jump, most = lo-wasHi, hi-wasLo // at least this far forward, at most that far
	case hi < wasLo-c.fixed:
		jump = hi - wasLo // at least this far back
	default:
		c.lo, c.hi, c.at = max(lo, wasLo), min(hi, wasHi), sent
		return nil
	}
	allow := c.fixed + d + (c.hi - c.lo) + (hi - lo)
	c.lo, c.hi, c.at = lo, hi, sent // the new baseline
	c.jumps++
	c.lastJump, c.lastJumpAge = jump, time.Now()
	return &quorum.ClockJumpError{Jump: jump, Most: most, Allowance: allow}
}

// skewed is the node's offset against this process's wall clock when a
// reply whose offset bounds are [lo, hi] puts it more than the allowed
// skew away, and 0 otherwise (also when no skew is set). The offset
// reported is the far bound: with the restart rule off it is how long the
// node is held out (quorum/clock.go NoteClock).
func (c *nodeClock) skewed(lo, hi time.Duration) time.Duration {
	if c.skew <= 0 {
		return 0
	}
	anchor := wallAnchor
	if c.anchor != nil {
		anchor = c.anchor
	}
	wall := anchor() // [lo, hi] − wall: the offset against this process's wall clock now
	switch {
	case lo-wall > c.skew:
		return hi - wall
	case hi-wall < -c.skew:
		return lo - wall
	}
	return 0
}

// wallAnchor is this process's wall time now less its monotonic time
// (mono): the wall clock as it reads now, not as it read when the process
// started (monoBase), which it may have been stepped from since (an
// instance started before NTP set its clock).
func wallAnchor() time.Duration {
	m := mono()
	return time.Duration(time.Now().Round(0).UnixNano()) - m
}

// ClockStats is what a node's replies said of its clock.
type ClockStats struct {
	Known  bool          // a reply carried the node's time
	Offset time.Duration // node wall time − this process's wall time, at the last reply (approximate: half the round trip)
	Jumps  uint64        // jumps seen
	Last   time.Duration // the last jump, signed
	LastAt time.Time     // when it was seen
}

// Clock reports what the node's replies said of its clock.
func (n *RedisNode) Clock() ClockStats {
	c := &n.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ClockStats{Known: c.known, Jumps: c.jumps, Last: c.lastJump, LastAt: c.lastJumpAge}
	if c.known {
		mid := (c.lo + c.hi) / 2
		s.Offset = mid - wallAnchor()
	}
	return s
}

// String describes a node's clock for INFO nodes.
func (s ClockStats) String() string {
	if !s.Known {
		return "unknown"
	}
	out := "offset " + s.Offset.Round(time.Millisecond).String() + " jumps " + strconv.FormatUint(s.Jumps, 10)
	if s.Jumps > 0 {
		out += fmt.Sprintf(" last %v %v ago", s.Last.Round(time.Millisecond), time.Since(s.LastAt).Round(time.Second))
	}
	return out
}
