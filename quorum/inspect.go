package quorum

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// inspection gathers the entries that nodes report for one key.
type inspection struct {
	t     tally
	votes map[string][]Entry // entries by token
	best  string             // the token held on most nodes
}

func (in *inspection) add(rep Reply) bool {
	in.t.add(rep.OK, rep.Err)
	if rep.Err == nil && rep.OK {
		e := rep.Entry
		in.votes[e.Token] = append(in.votes[e.Token], e)
		if len(in.votes[e.Token]) > len(in.votes[in.best]) {
			in.best = e.Token
		}
	}
	return len(in.votes[in.best]) >= in.t.q || in.t.pending() == 0
}

// Inspect reports who holds key: a token held on a majority of nodes. The
// validity is the shortest remaining TTL among that majority, less drift
// and the time the inspection took.
func (r *Redlock) Inspect(ctx context.Context, key string) (engine.Holder, bool, error) {
	start := time.Now()
	in := &inspection{t: newTally(r.quorum, len(r.nodes)), votes: map[string][]Entry{}}
	if _, err := fanout(ctx, r.nodes, r.cfg.NodeTimeout, &Op{Kind: OpInspect, Key: key}, in.add); err != nil {
		return engine.Holder{}, false, err
	}
	held := in.votes[in.best]
	if len(held) < r.quorum {
		if in.t.answered() >= r.quorum { // no token has a majority: free
			return engine.Holder{}, false, nil
		}
		return engine.Holder{}, false, in.t.noQuorum("inspect")
	}
	h := engine.Holder{Token: in.best, Fence: held[0].Fence, Validity: held[0].TTL, Mode: held[0].Mode, Name: held[0].Name}
	for _, e := range held[1:] {
		h.Fence = max(h.Fence, e.Fence)
		h.Validity = min(h.Validity, e.TTL)
	}
	h.Validity -= time.Since(start) + r.drift(h.Validity)
	return h, h.Validity > 0, nil
}
