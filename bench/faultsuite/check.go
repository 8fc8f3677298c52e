package main

import (
	"fmt"
	"slices"
	"time"
)

// verdict is what the checker found in a history.
type verdict struct {
	DoubleGrants   int // grants that began while another token's grant of the key was held
	FenceRegressed int // fenced grants whose fence was not above every earlier grant's of the key
	StaleWrites    int // writes accepted under a fence below one already granted to another
	RefusedWrites  int // writes the register refused (a holder's fence was already passed)
	Examples       []string
}

// violations is the number of safety violations.
func (v verdict) violations() int { return v.DoubleGrants + v.FenceRegressed + v.StaleWrites }

// maxExamples bounds the examples kept for the report.
const maxExamples = 5

func (v *verdict) example(format string, args ...any) {
	if len(v.Examples) < maxExamples {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

// check looks for double grants, fences going back and stale writes
// accepted. Only live grants count: a client never used one that arrived
// expired.
func check(grants []grant, writes []write) verdict {
	var v verdict
	byKey := map[string][]grant{}
	for _, g := range grants {
		if g.live() {
			byKey[g.Key] = append(byKey[g.Key], g)
		}
	}
	tops := map[string][]int64{}
	for key, gs := range byKey {
		slices.SortFunc(gs, func(a, b grant) int { return a.Recv.Compare(b.Recv) })
		checkOverlaps(&v, gs)
		checkFences(&v, gs)
		tops[key] = topFences(gs)
	}
	for _, w := range writes {
		if !w.Accepted {
			v.RefusedWrites++
			continue
		}
		checkStale(&v, w, byKey[w.Key], tops[w.Key])
	}
	return v
}

// checkOverlaps counts grants that began while another token's grant of
// the same key was still held; gs are sorted by Recv.
func checkOverlaps(v *verdict, gs []grant) {
	var held []grant // grants not yet ended at the current Recv
	for _, g := range gs {
		held = slices.DeleteFunc(held, func(h grant) bool { return !h.End.After(g.Recv) })
		for _, h := range held {
			if h.Token != g.Token {
				v.DoubleGrants++
				v.example("double grant on %s: fence %d (0: legacy) held until %s, fence %d granted %v before that",
					g.Key, h.Fence, h.End.Format("15:04:05.000"), g.Fence, h.End.Sub(g.Recv).Round(time.Millisecond))
				break
			}
		}
		held = append(held, g)
	}
}

// checkFences counts fenced grants whose fence is not above the highest
// fence granted earlier to another token; gs are sorted by Recv.
func checkFences(v *verdict, gs []grant) {
	var top grant
	for _, g := range gs {
		if g.Fence == 0 {
			continue
		}
		if top.Fence != 0 && g.Fence <= top.Fence && g.Token != top.Token {
			v.FenceRegressed++
			v.example("fence went back on %s: %d granted after %d", g.Key, g.Fence, top.Fence)
			continue
		}
		if g.Fence > top.Fence {
			top = g
		}
	}
}

// checkStale counts an accepted write whose fence is below that of a grant
// received before the write (another token's: tokens are never reused);
// top[i] is the highest fence among gs[:i+1], sorted by Recv.
func checkStale(v *verdict, w write, gs []grant, top []int64) {
	n, _ := slices.BinarySearchFunc(gs, w.At, func(g grant, t time.Time) int { return g.Recv.Compare(t) })
	if n > 0 && top[n-1] > w.Fence {
		v.StaleWrites++
		v.example("stale write accepted on %s: fence %d written after fence %d was granted", w.Key, w.Fence, top[n-1])
	}
}

// topFences is the running highest fence of gs.
func topFences(gs []grant) []int64 {
	top := make([]int64, len(gs))
	var m int64
	for i, g := range gs {
		m = max(m, g.Fence)
		top[i] = m
	}
	return top
}
