package lists

import (
	"sync"
	"time"
)

// debts are elements a node still owes a removal of. When a blocking pop
// is won on one node, every other node owes the element at once (before
// the client can pop again); the clean-up pays where it finds it (the
// node popped it too, or LREM removed it). A node where it is not there
// yet — the script that pushes it on every node has not reached that
// node — keeps owing it: the next time a pop on that node returns that
// element, it is dropped instead, and the pop goes on. A
// debt is forgotten after debtKeep (a node the push never reaches would
// otherwise eat a later signal of the same value forever); one that comes
// later is the spurious wake-up the package doc describes.
type debts struct {
	mu   sync.Mutex
	owed map[debtKey][]time.Time // when each owed copy was recorded
}

type debtKey struct {
	node       int
	key, value string
}

// debtKeep is how long a node owes a removal.
const debtKeep = 30 * time.Second

// owe records that node owes the removal of one copy of value from key.
func (d *debts) owe(node int, key, value string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owed == nil {
		d.owed = map[debtKey][]time.Time{}
	}
	k := debtKey{node, key, value}
	d.owed[k] = append(d.owed[k], time.Now())
}

// pay reports whether node owed the removal of value from key, and pays
// one copy if so.
func (d *debts) pay(node int, key, value string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for k, at := range d.owed {
		for len(at) > 0 && now.Sub(at[0]) > debtKeep {
			at = at[1:]
		}
		if len(at) == 0 {
			delete(d.owed, k)
		} else {
			d.owed[k] = at
		}
	}
	k := debtKey{node, key, value}
	at := d.owed[k]
	if len(at) == 0 {
		return false
	}
	if len(at) == 1 {
		delete(d.owed, k)
	} else {
		d.owed[k] = at[1:]
	}
	return true
}
