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
