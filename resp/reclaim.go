package resp

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// The memory of clients' requests. The budget (MaxBuffered) counts the
// read buffers that are allocated, but a buffer a connection drops (a
// long command's, once served or refused, or a smaller one it outgrew)
// stays in the process until the garbage collector runs, which, left to
// itself, waits until the heap has doubled, and then keeps the pages for
// reuse. So that the process stays within MaxBuffered plus a constant, and
// gives the memory back once the clients are gone, the budget reclaims
// dropped buffers itself: once reclaimAfter of them have been dropped, and
// again reclaimQuiet after the last one, it runs a collection that returns
// free memory to the operating system. Only buffers larger than a
// borrowed one (readChunk) count: ordinary traffic never triggers it.
const (
	reclaimQuiet = time.Second
	reclaimMin   = 4 << 20 // reclaimAfter is at least this, or an eighth of MaxBuffered
)

type reclaimer struct {
	dropped atomic.Int64 // bytes of large buffers dropped since the last reclaim
	running atomic.Bool

	mu    sync.Mutex
	timer *time.Timer
}

// dropped tells the budget a read buffer of size bytes was dropped.
func (b *budget) dropped(size int) {
	r := &b.reclaim
	if r.dropped.Add(int64(size)) >= max(b.max.Load()/8, reclaimMin) {
		r.start()
	}
	r.mu.Lock()
	if r.timer == nil {
		r.timer = time.AfterFunc(reclaimQuiet, r.start)
	} else {
		r.timer.Reset(reclaimQuiet)
	}
	r.mu.Unlock()
}

// start runs a reclaim in the background unless one is running.
func (r *reclaimer) start() {
	if !r.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		r.dropped.Store(0)
		debug.FreeOSMemory()
		r.running.Store(false)
	}()
}
