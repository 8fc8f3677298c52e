package main

import (
	"sync"
	"time"
)

// grant is one lock a client was granted and believed it held from Recv
// (the grant reply arrived) to End: the request's send time plus the
// validity it was told (or the last renewal's), or the moment it sent its
// release or learnt of a loss, whichever came first. Measuring validity
// from the send time is conservative: lockproxy starts counting later.
type grant struct {
	Key, Token string
	Fence      int64 // 0: a legacy grant, which has no fence
	Recv, End  time.Time
}

// live says the grant was still valid when its reply arrived; a grant that
// arrived expired (a paused lockproxy) was never used.
func (g grant) live() bool { return g.Recv.Before(g.End) }

// write is one write to the fenced register.
type write struct {
	Key, Token string
	Fence      int64
	At         time.Time
	Accepted   bool
}

// history records what the clients saw; its methods are safe for
// concurrent use.
type history struct {
	mu     sync.Mutex
	grants []*grant
	writes []write
	last   map[string]fenced // the register: the last accepted write per key
}

// fenced is a register cell: the fence and token of the last write.
type fenced struct {
	fence int64
	token string
}

func newHistory() *history { return &history{last: map[string]fenced{}} }

// granted records a grant; the caller may move its End earlier through
// ended until it is done with it.
func (h *history) granted(g grant) *grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &g
	h.grants = append(h.grants, p)
	return p
}

// setEnd sets a grant's End.
func (h *history) setEnd(g *grant, end time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g.End = end
}

// end is a grant's End.
func (h *history) end(g *grant) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return g.End
}

// writeHeld writes to the register under g's fence if g is still held,
// checked in the same step as the write; false if it was not.
func (h *history) writeHeld(g *grant) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !time.Now().Before(g.End) {
		return false
	}
	h.writeLocked(g.Key, g.Token, g.Fence)
	return true
}

// write is the register: it accepts a write under fence unless a higher
// fence, or the same fence under another token, was accepted for key.
func (h *history) write(key, token string, fence int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writeLocked(key, token, fence)
}

// writeLocked is write with h.mu held.
func (h *history) writeLocked(key, token string, fence int64) bool {
	last, seen := h.last[key]
	ok := !seen || fence > last.fence || (fence == last.fence && token == last.token)
	if ok {
		h.last[key] = fenced{fence, token}
	}
	h.writes = append(h.writes, write{key, token, fence, time.Now(), ok})
	return ok
}

// snapshot copies the grants and writes for the checker.
func (h *history) snapshot() ([]grant, []write) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gs := make([]grant, len(h.grants))
	for i, g := range h.grants {
		gs[i] = *g
	}
	return gs, append([]write(nil), h.writes...)
}
