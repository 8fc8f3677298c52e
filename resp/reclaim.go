package resp

import (
	"runtime"
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
// dropped buffers itself: once an eighth of MaxBuffered (at least
// reclaimMin) of them have been dropped it runs a collection, so that new
// buffers reuse their pages (at most once per collectEvery), and
// reclaimQuiet after the last one it also returns free memory to the
// operating system. Only buffers larger than a borrowed one (readChunk)
// count: ordinary traffic never triggers either.
const (
	reclaimQuiet = time.Second
	collectEvery = 100 * time.Millisecond
	reclaimMin   = 4 << 20
)

type reclaimer struct {
	dropped atomic.Int64 // bytes of large buffers dropped since the last collection
	running atomic.Bool
	last    atomic.Int64 // when the last collection started, in Unix nanoseconds

	mu    sync.Mutex
	timer *time.Timer
}

// dropped tells the budget a read buffer of size bytes was dropped.
func (b *budget) dropped(size int) {
	r := &b.reclaim
	if r.dropped.Add(int64(size)) >= max(b.max.Load()/8, reclaimMin) {
		r.start(runtime.GC, collectEvery)
	}
	r.mu.Lock()
	if r.timer == nil {
		r.timer = time.AfterFunc(reclaimQuiet, func() { r.start(debug.FreeOSMemory, 0) })
	} else {
		r.timer.Reset(reclaimQuiet)
	}
	r.mu.Unlock()
}

// start runs collect in the background unless a collection is running or
// started less than every ago.
func (r *reclaimer) start(collect func(), every time.Duration) {
	now := time.Now().UnixNano()
	if now-r.last.Load() < int64(every) || !r.running.CompareAndSwap(false, true) {
		return
	}
	r.last.Store(now)
	go func() {
		r.dropped.Store(0)
		collect()
		r.running.Store(false)
	}()
}
