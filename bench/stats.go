package main

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// reservoir keeps at most cap latency samples: every sample until it is
// full, then a uniform random subset (Vitter's algorithm R). Below cap the
// percentiles are exact.
type reservoir struct {
	cap  int
	seen int64
	s    []time.Duration
	rng  *rand.Rand
}

func newReservoir(cap int, seed uint64) *reservoir {
	return &reservoir{cap: cap, s: make([]time.Duration, 0, min(cap, 4096)), rng: rand.New(rand.NewPCG(seed, 0x6c70))}
}

func (r *reservoir) add(d time.Duration) {
	r.seen++
	if len(r.s) < r.cap {
		r.s = append(r.s, d)
		return
	}
	if j := r.rng.Int64N(r.seen); j < int64(r.cap) {
		r.s[j] = d
	}
}

func (r *reservoir) samples() []time.Duration { return r.s }

func sortDurations(d []time.Duration) { slices.Sort(d) }

// percentile is the nearest-rank p-th percentile (0 < p <= 1) of sorted;
// 0 when there are no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// maxErrorKinds bounds how many distinct error messages an errorLog keeps.
const maxErrorKinds = 8

// errorLog counts errors by message, keeping at most maxErrorKinds
// messages; the rest are counted as other.
type errorLog struct {
	kinds map[string]int64
	other int64
}

func (l *errorLog) add(err error) { l.addN(err.Error(), 1) }

func (l *errorLog) addN(msg string, n int64) {
	if l.kinds == nil {
		l.kinds = map[string]int64{}
	}
	if _, ok := l.kinds[msg]; !ok && len(l.kinds) >= maxErrorKinds {
		l.other += n
		return
	}
	l.kinds[msg] += n
}

func (l *errorLog) merge(m errorLog) {
	for msg, n := range m.kinds {
		l.addN(msg, n)
	}
	l.other += m.other
}

// lines describe the errors, most frequent first.
func (l errorLog) lines() []string {
	msgs := make([]string, 0, len(l.kinds))
	for msg := range l.kinds {
		msgs = append(msgs, msg)
	}
	slices.SortFunc(msgs, func(a, b string) int {
		return cmp.Or(cmp.Compare(l.kinds[b], l.kinds[a]), strings.Compare(a, b))
	})
	out := make([]string, 0, len(msgs)+1)
	for _, msg := range msgs {
		out = append(out, fmt.Sprintf("%d x %s", l.kinds[msg], strings.TrimSpace(msg)))
	}
	if l.other > 0 {
		out = append(out, fmt.Sprintf("%d x (other messages)", l.other))
	}
	return out
}

// waits are the times from asking for the lock to holding it, sorted.
func waits(gs []grant) []time.Duration {
	return spans(gs, func(g grant) time.Duration { return g.granted - g.asked })
}

// helds are the times from holding the lock to hearing it was released
// (the hold plus the release's round trip), sorted.
func helds(gs []grant) []time.Duration {
	return spans(gs, func(g grant) time.Duration { return g.released - g.granted })
}

// spans is span of every grant, sorted.
func spans(gs []grant, span func(grant) time.Duration) []time.Duration {
	out := make([]time.Duration, len(gs))
	for i, g := range gs {
		out[i] = span(g)
	}
	sortDurations(out)
	return out
}

// handoffGaps are, for each grant but the first, how long the lock sat free
// while a client waited for it, sorted: from the moment the previous holder
// (the grant before it in time) heard its release was done, or the moment a
// client that got the lock later first asked if that came after, to this
// grant. A grant that arrived before the previous holder heard of its
// release has a gap of 0.
func handoffGaps(gs []grant) []time.Duration {
	if len(gs) < 2 {
		return nil
	}
	byTime := byGrant(gs)
	firstAsked := suffixMinAsked(byTime)
	gaps := make([]time.Duration, 0, len(byTime)-1)
	for i := 1; i < len(byTime); i++ {
		free := max(byTime[i-1].released, firstAsked[i])
		gaps = append(gaps, max(byTime[i].granted-free, 0))
	}
	sortDurations(gaps)
	return gaps
}

// waitsBehind are the waits of the grants that came after another client's
// grant while they waited, sorted: the acquisitions that had to wait for
// another holder, unlike a client that takes the lock again as soon as it
// released it and nobody else got it meanwhile.
func waitsBehind(gs []grant) []time.Duration {
	byTime := byGrant(gs)
	var out []time.Duration
	for i := 1; i < len(byTime); i++ {
		if byTime[i-1].granted > byTime[i].asked {
			out = append(out, byTime[i].granted-byTime[i].asked)
		}
	}
	sortDurations(out)
	return out
}

// byGrant is a copy of gs in the order they were granted.
func byGrant(gs []grant) []grant {
	return slices.SortedFunc(slices.Values(gs), func(a, b grant) int { return cmp.Compare(a.granted, b.granted) })
}

// suffixMinAsked[i] is the earliest asked among gs[i:]: the first moment one
// of the clients granted from gs[i] on was waiting.
func suffixMinAsked(gs []grant) []time.Duration {
	out := make([]time.Duration, len(gs))
	for i := len(gs) - 1; i >= 0; i-- {
		out[i] = gs[i].asked
		if i+1 < len(gs) {
			out[i] = min(out[i], out[i+1])
		}
	}
	return out
}

// fairness is the fewest and the most grants a client had, and the largest
// distance of a client's grants from the mean, in percent of the mean (0
// when there were none).
func fairness(perClient []int64) (fewest, most int64, maxDev float64) {
	if len(perClient) == 0 {
		return 0, 0, 0
	}
	fewest, most = slices.Min(perClient), slices.Max(perClient)
	var sum int64
	for _, n := range perClient {
		sum += n
	}
	if sum == 0 {
		return fewest, most, 0
	}
	mean := float64(sum) / float64(len(perClient))
	maxDev = max(mean-float64(fewest), float64(most)-mean) / mean * 100
	return fewest, most, maxDev
}
