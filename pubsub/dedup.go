package pubsub

import (
	"sync"
	"time"
)

// Dedup delivers once a message that several nodes send. A message a
// script published on every node, or that PUBLISH sent to every node,
// reaches this instance once per node; the same payload may also be
// published again on purpose (an unlock message per unlock), so copies are
// counted, not remembered: per message (pattern, channel, payload) it keeps
// the copies delivered, D, and per node the copies it sent, S. A copy from
// node n increments S[n] and is delivered iff S[n] > D (then D++). The
// entry goes once every node that is up has sent D copies.
//
// Bounds: an entry lives at most Keep after its last delivery, and the
// table holds at most Max entries (the oldest go first). A node that never
// sends its copy (it missed the publish) holds its entry only that long; a
// copy that arrives after its entry went is delivered again (a duplicate,
// which a lock waiter reads as a spurious wake-up and retries).
//
// A node that comes back (Up) has missed whatever was published while it
// was away and sends nothing older: it is counted as caught up with every
// entry. A copy it sends for a message published just before it came back
// is then delivered again; this errs towards a duplicate, never a loss.
type Dedup struct {
	keep time.Duration
	max  int
	now  func() time.Time

	mu      sync.Mutex
	up      []bool
	entries map[dedupKey]*dedupEntry
	order   []dedupKey // by time of last delivery, oldest first; may hold stale keys
}

type dedupKey struct{ pattern, channel, payload string }

type dedupEntry struct {
	delivered int
	seen      []int
	at        time.Time // last delivery
}

// Defaults of NewDedup.
const (
	DefaultDedupKeep = 30 * time.Second
	DefaultDedupMax  = 100000
)

// NewDedup counts copies from nodes 0..nodes-1, all up; keep and max bound
// the table (DefaultDedupKeep and DefaultDedupMax when ≤ 0).
func NewDedup(nodes int, keep time.Duration, max int) *Dedup {
	if keep <= 0 {
		keep = DefaultDedupKeep
	}
	if max <= 0 {
		max = DefaultDedupMax
	}
	up := make([]bool, nodes)
	for i := range up {
		up[i] = true
	}
	return &Dedup{keep: keep, max: max, now: time.Now, up: up, entries: map[dedupKey]*dedupEntry{}}
}

// First counts a copy from node and reports whether to deliver it.
func (d *Dedup) First(node int, pattern, channel string, payload []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	d.expire(now)
	k := dedupKey{pattern, channel, string(payload)}
	e := d.entries[k]
	if e == nil {
		e = &dedupEntry{seen: make([]int, len(d.up))}
		d.entries[k] = e
	}
	e.seen[node]++
	first := e.seen[node] > e.delivered
	if first {
		e.delivered++
		e.at = now
		d.order = append(d.order, k)
	}
	if d.caughtUp(e) {
		delete(d.entries, k)
	}
	return first
}

// caughtUp reports whether every node that is up sent e's delivered copies.
func (d *Dedup) caughtUp(e *dedupEntry) bool {
	for n, up := range d.up {
		if up && e.seen[n] < e.delivered {
			return false
		}
	}
	return true
}

// expire drops entries older than keep, and the oldest beyond max.
func (d *Dedup) expire(now time.Time) {
	for len(d.order) > 0 {
		k := d.order[0]
		if e := d.entries[k]; e != nil {
			if now.Sub(e.at) < d.keep && len(d.entries) <= d.max {
				break
			}
			delete(d.entries, k)
		}
		d.order = d.order[1:]
	}
	if cap(d.order) > 2*len(d.order)+64 {
		d.order = append([]dedupKey(nil), d.order...) // let the dropped head go
	}
}

// Up marks node as subscribed again: caught up with every entry.
func (d *Dedup) Up(node int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.up[node] = true
	for k, e := range d.entries {
		e.seen[node] = e.delivered
		if d.caughtUp(e) {
			delete(d.entries, k)
		}
	}
}

// Down marks node as disconnected: entries no longer wait for it.
func (d *Dedup) Down(node int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.up[node] = false
	for k, e := range d.entries {
		if d.caughtUp(e) {
			delete(d.entries, k)
		}
	}
}

// Len is the number of entries held.
func (d *Dedup) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}
