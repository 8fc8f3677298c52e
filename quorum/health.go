package quorum

import "sync"

// suspectAfter is how many calls in a row a node must fail before it is
// suspected.
const suspectAfter = 2

// health tracks the nodes that keep failing. A suspected node is still
// sent every call, but a fan-out does not wait for its answer once every
// other node has answered; its first answer clears it. At most n-quorum
// nodes are suspected at once: a majority is always waited for, so a
// machine too loaded for any node to answer in time slows down rather
// than failing every call at once.
type health struct {
	mu       sync.Mutex
	fails    []int  // calls failed in a row, by node
	suspects uint64 // bit i: node i is suspected
	most     int    // the most nodes suspected at once
}

func newHealth(n, quorum int) *health {
	return &health{fails: make([]int, n), most: n - quorum}
}

// note records node i's answer to one call: an error counts toward
// suspicion, an answer (which came within the node timeout) clears it.
func (h *health) note(i int, err error) {
	if i >= 64 {
		return // nodes past 64 are never suspected: always waited for
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.fails[i] = 0
		h.suspects &^= 1 << i
		return
	}
	h.fails[i]++
	if h.fails[i] >= suspectAfter && h.count() < h.most {
		h.suspects |= 1 << i
	}
}

func (h *health) count() int {
	n := 0
	for s := h.suspects; s != 0; s &= s - 1 {
		n++
	}
	return n
}

// suspected returns the set of suspected nodes, bit i for node i.
func (h *health) suspected() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.suspects
}
