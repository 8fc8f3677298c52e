package zookeeper

import (
	"bytes"
	"time"
)

// When a lock is over, judged by this instance's own monotonic clock
// alone: no two instances' clocks need agree, and a wall clock that steps
// (NTP, a VM migration, an operator) changes nothing.
//
// A lock node says how long its lease lasts (ttl_ms). The instance that
// wrote a version of the node knows when it did on its monotonic clock
// (zkData.at, taken before the write was sent, and before the validity
// it reported began): it ends that version ttl later, when the validity
// it reported runs out. Any other instance knows only that the version
// existed when it first read it: from then on the lease has run at least
// as long as its own monotonic clock says, so it ends the version once
// ttl plus the drift allowance has passed since, never before. The price
// is a later takeover: an instance that first sees a version late ends
// it as late, up to ttl plus the allowance after its real end.

// drift is the allowance for monotonic clocks that run at slightly
// different rates: Redlock's drift factor, 1% of ttl, plus 2ms.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// sighting is a version of a lock node as this instance first read it.
type sighting struct {
	mzxid int64         // the version's: every write gives a node a new one
	since time.Time     // when this instance first read it (monotonic)
	ttl   time.Duration // the version's lease
}

// end is when this instance may end the version: ttl plus the drift
// allowance after it first read it.
func (s sighting) end() time.Time { return s.since.Add(s.ttl + drift(s.ttl)) }

// maxSeen bounds the versions remembered. Past it, those whose end has
// passed are forgotten, then all: a version forgotten counts again from
// when it is next read, which ends it later, never earlier.
const maxSeen = 4096

// dueIn is how long until this instance may end lock node n, as read
// from ZooKeeper; not positive: now.
func (z *ZooKeeper) dueIn(n lockNode) time.Duration {
	z.mu.Lock()
	defer z.mu.Unlock()
	if d, ok := z.wroteLocked(n); ok {
		return d.leftHere()
	}
	return time.Until(z.sightLocked(n).end())
}

// sight notes that this instance read lock node n, if it had not read
// that version before.
func (z *ZooKeeper) sight(n lockNode) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.sightLocked(n)
}

// wroteLocked is the data this instance last wrote to node n (track),
// if n is still at that version: the same bytes, naming this instance
// (By). z.mu is held.
func (z *ZooKeeper) wroteLocked(n lockNode) (zkData, bool) {
	o := z.own[n.path]
	if o == nil || !o.held || o.wrote.at.IsZero() || o.wrote.By != z.id || !bytes.Equal(o.wrote.encode(), n.data.encode()) {
		return zkData{}, false
	}
	return o.wrote, true
}

// sightLocked is the sighting of n's version, made now if it is the
// first. z.mu is held.
func (z *ZooKeeper) sightLocked(n lockNode) sighting {
	s, ok := z.seen[n.path]
	if ok && s.mzxid == n.stat.Mzxid {
		return s
	}
	if len(z.seen) >= maxSeen {
		z.pruneSeenLocked()
	}
	s = sighting{mzxid: n.stat.Mzxid, since: time.Now(), ttl: n.data.ttl()}
	z.seen[n.path] = s
	return s
}

// pruneSeenLocked forgets the sightings whose end has passed, and all of
// them if that is not enough. z.mu is held.
func (z *ZooKeeper) pruneSeenLocked() {
	now := time.Now()
	for p, s := range z.seen {
		if now.After(s.end()) {
			delete(z.seen, p)
		}
	}
	if len(z.seen) >= maxSeen {
		clear(z.seen)
	}
}
