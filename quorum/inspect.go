package quorum

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// inspection gathers the entries that nodes report for one key.
type inspection struct {
	t     tally
	r     *Redlock
	votes map[string][]Entry // entries by token
	best  string             // the token held on most nodes
	// sure is, by token, the fences recorded by holds that cannot
	// predate their node's fence floor (staleHold).
	sure map[string]map[int64]bool
}

// add counts one reply; it reports true once the answer is known: a
// majority holds one token and agrees on its lease and fence, or nobody is
// left to answer. A majority that disagrees (a renewal or an EXPIRE that
// has not landed on one of them yet, a node that took the key for the
// grant with a higher counter: commit) waits for the other nodes: the
// lock's lease and fence are what a majority holds, and the late node may
// be the stale one.
func (in *inspection) add(rep Reply) bool {
	in.t.add(rep.OK, rep.Err)
	if rep.Err == nil && rep.OK {
		e := rep.Entry
		in.votes[e.Token] = append(in.votes[e.Token], e)
		if !in.r.staleHold(rep.Tag, e.Fence) {
			if in.sure[e.Token] == nil {
				in.sure[e.Token] = map[int64]bool{}
			}
			in.sure[e.Token][e.Fence] = true
		}
		if len(in.votes[e.Token]) > len(in.votes[in.best]) {
			in.best = e.Token
		}
	}
	held := in.votes[in.best]
	return len(held) >= in.t.q && in.agree(held) || in.t.pending() == 0
}

// agree reports whether entries show one lease: the same mode and fence,
// and TTLs within the drift allowance of each other.
func (in *inspection) agree(entries []Entry) bool {
	lo, hi := entries[0].TTL, entries[0].TTL
	for _, e := range entries[1:] {
		if e.Mode != entries[0].Mode || e.Fence != entries[0].Fence {
			return false
		}
		lo, hi = min(lo, e.TTL), max(hi, e.TTL)
	}
	return hi-lo <= in.r.drift(hi)
}

// Inspect reports who holds key: a token held on a majority of nodes. The
// validity is how long a majority still holds it — the quorum-th longest
// TTL among its holders — less drift and the time the inspection took; the
// mode is the one most of them record.
func (r *Redlock) Inspect(ctx context.Context, key string) (engine.Holder, bool, error) {
	start := time.Now()
	in := &inspection{t: newTally(r.quorum, len(r.nodes)), r: r, votes: map[string][]Entry{}, sure: map[string]map[int64]bool{}}
	if _, err := r.fanout(ctx, r.timeout(0), &Op{Kind: OpInspect, Key: key}, nil, in.add); err != nil {
		return engine.Holder{}, false, err
	}
	held := in.votes[in.best]
	if len(held) < r.quorum {
		if in.t.answered() >= r.quorum { // no token has a majority: free
			return engine.Holder{}, false, nil
		}
		return engine.Holder{}, false, in.t.noQuorum("inspect")
	}
	h, agreed := holder(held, r.quorum)
	if h.Fence > 0 && !in.sure[h.Token][h.Fence] {
		// Only holds that may predate their node's fence floor record
		// it (a refused attempt's, left while the node was held out
		// after a restart): it may be below fences granted before. The
		// key is held, with a fence lockproxy does not know: 0, as for a
		// holder lockproxy did not write. The token's retry commits a
		// fence above every counter (claimSummary.fence), shown then
		// (TestLockInfoOfAStaleHold).
		h.Fence = 0
	}
	if !agreed && h.Fence > 0 {
		// No fence has a majority (a bare majority answered, and they
		// differ): the largest, which may be on those holders' counters
		// only, is shown once a majority's counters are at least it: it is
		// committed, as a retry commits it (claimSummary.fence), which also
		// raises the holders' records to it, so that no later grant is at
		// or below a fence LOCKINFO showed, and a retry and LOCKINFO go on
		// answering it. Where the token no longer holds the key on a
		// majority, the nodes that answered were raised all the same.
		if _, err := r.commit(ctx, key, h.Token, h.Fence, 0); err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			return engine.Holder{}, false, err
		}
	}
	h.Validity -= time.Since(start) + r.drift(h.Validity)
	return h, h.Validity > 0, nil
}

// holder sums up the entries of the majority that holds one token. Its
// fence is the one a majority of the nodes records, as a retry's
// (heldFence); agreed is false where none does, and the fence is the
// largest.
func holder(held []Entry, quorum int) (h engine.Holder, agreed bool) {
	slices.SortFunc(held, func(a, b Entry) int { return cmp.Compare(b.TTL, a.TTL) }) // longest first
	h = engine.Holder{Token: held[0].Token, Validity: held[quorum-1].TTL, Name: held[0].Name, Type: held[0].Type}
	leases := 0
	fences := make([]int64, len(held))
	for i, e := range held {
		fences[i] = e.Fence
		if e.Mode == engine.Lease {
			leases++
		}
	}
	h.Fence = heldFence(fences, quorum)
	h.Mode = engine.Bound
	if 2*leases >= len(held) {
		h.Mode = engine.Lease
	}
	return h, majority(fences, quorum) != 0
}
