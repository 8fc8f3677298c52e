package zookeeper

import (
	"path"
	"sync"

	"github.com/go-zookeeper/zk"
)

// maxBatch bounds the calls sent in one multi (ZooKeeper bounds a request
// to about 1 MB; a call's ops are a few hundred bytes).
const maxBatch = 64

// batcher sends the multis of many calls as one (see above). send is the
// connection's Multi, and del its Delete: a delete that goes alone is sent
// as one, which ZooKeeper serves for less than a multi.
type batcher struct {
	send func(ops ...any) ([]zk.MultiResponse, error)
	del  func(path string, version int32) error

	mu      sync.Mutex
	pending []*batchCall
	sending int // goroutines sending the pending calls, at most maxSending
}

// maxSending bounds the multis in flight at once. ZooKeeper syncs the
// requests that arrive while it syncs its log in its next sync: with a
// second multi on its way, the calls that pile up meanwhile go then,
// instead of waiting for the first multi's reply and a sync of their own.
// At concurrency 32 over one server that is 15% more cycles a second than
// one multi at a time (go run ./bench, 4 runs each); four made no more.
const maxSending = 2

// batchCall is one call's multi and, once done is closed, its answer.
type batchCall struct {
	ops  []any
	res  []zk.MultiResponse
	err  error
	done chan struct{}
}

// multi runs ops as one multi, maybe within a larger one, and returns
// their results as Conn.Multi does. It blocks until they are answered.
func (b *batcher) multi(ops ...any) ([]zk.MultiResponse, error) {
	c := &batchCall{ops: ops, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	lead := b.sending < maxSending
	if lead {
		b.sending++
	}
	b.mu.Unlock()
	if lead {
		b.drain(c)
	}
	<-c.done
	return c.res, c.err
}

// drain sends the pending calls, a batch at a time, until none is left. A
// caller that drains hands the rest, if any, to a goroutine once its own
// call, own, is answered: a lone call starts none.
func (b *batcher) drain(own *batchCall) {
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.pending = nil
			b.sending--
		}
		b.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		b.flush(batch)
		if own != nil && isClosed(own.done) {
			b.mu.Lock()
			rest := len(b.pending) > 0
			if !rest {
				b.sending--
			}
			b.mu.Unlock()
			if rest {
				go b.drain(nil)
			}
			return
		}
	}
}

// take removes the calls of the next multi from the pending ones: the
// longest run, from the first, of at most maxBatch calls no two of which
// create a sequential node under the same parent. Nodes that one multi
// creates share its zxid, which is their fence: two locks of one key
// created together would share a fence. b.mu is held.
func (b *batcher) take() []*batchCall {
	parents := map[string]bool{}
	n := 0
	for ; n < len(b.pending) && n < maxBatch; n++ {
		if !claimParents(parents, b.pending[n].ops) && n > 0 {
			break
		}
	}
	batch := b.pending[:n:n]
	b.pending = b.pending[n:]
	return batch
}

// claimParents adds to parents the parents of the sequential nodes that
// ops create; false if one of them was there already.
func claimParents(parents map[string]bool, ops []any) bool {
	ok := true
	for _, op := range ops {
		if c, isCreate := op.(*zk.CreateRequest); isCreate && c.Flags&zk.FlagSequence != 0 {
			dir := path.Dir(c.Path)
			ok = ok && !parents[dir]
			parents[dir] = true
		}
	}
	return ok
}

// flush sends batch in one multi and answers its calls.
func (b *batcher) flush(batch []*batchCall) {
	if len(batch) == 1 {
		batch[0].answer(b.alone(batch[0].ops))
		return
	}
	var ops []any
	for _, c := range batch {
		ops = append(ops, c.ops...)
	}
	res, err := b.send(ops...)
	switch {
	case err == nil && len(res) == len(ops):
		for _, c := range batch {
			c.answer(res[:len(c.ops):len(c.ops)], nil)
			res = res[len(c.ops):]
		}
	case len(res) == len(ops): // an op failed, so none was applied
		var wg sync.WaitGroup
		for _, c := range batch {
			wg.Go(func() { c.answer(b.alone(c.ops)) })
		}
		wg.Wait()
	default: // the connection failed
		for _, c := range batch {
			c.answer(nil, err)
		}
	}
}

// alone sends the ops of one call.
func (b *batcher) alone(ops []any) ([]zk.MultiResponse, error) {
	if d, ok := ops[0].(*zk.DeleteRequest); ok && len(ops) == 1 && b.del != nil {
		if err := b.del(d.Path, d.Version); err != nil {
			return nil, err
		}
		return make([]zk.MultiResponse, 1), nil
	}
	return b.send(ops...)
}

func (c *batchCall) answer(res []zk.MultiResponse, err error) {
	c.res, c.err = res, err
	close(c.done)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
