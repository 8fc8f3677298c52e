package zookeeper

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// fakeMulti stands in for a connection's Multi: it answers each create
// with its path and fails the ops whose path is in fail; the first request
// waits for release, so that calls pile up behind it.
type fakeMulti struct {
	mu       sync.Mutex
	requests [][]any
	fail     map[string]error
	release  chan struct{}
	down     error // every request fails with it
}

func (f *fakeMulti) send(ops ...any) ([]zk.MultiResponse, error) {
	f.mu.Lock()
	f.requests = append(f.requests, ops)
	first := len(f.requests) == 1
	f.mu.Unlock()
	if first && f.release != nil {
		<-f.release
	}
	if f.down != nil {
		return nil, f.down
	}
	res := make([]zk.MultiResponse, len(ops))
	var failed error
	for i, op := range ops {
		p := op.(*zk.CreateRequest).Path
		if err := f.fail[p]; err != nil && failed == nil {
			failed = err
			res[i].Error = err
			continue
		}
		res[i].String = p
	}
	if failed != nil {
		for i := range res { // ZooKeeper applies none of them
			if res[i].Error == nil {
				res[i] = zk.MultiResponse{Error: zk.ErrAPIError}
			}
		}
		return res, failed
	}
	return res, nil
}

func (f *fakeMulti) sent() [][]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]any(nil), f.requests...)
}

// pileUp runs n calls of one create each, "/c0".."/c<n-1>", on b while
// the first request is held, and returns each call's answer.
func pileUp(t *testing.T, b *batcher, f *fakeMulti, n int) ([][]zk.MultiResponse, []error) {
	t.Helper()
	f.release = make(chan struct{})
	res, errs := make([][]zk.MultiResponse, n), make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { res[0], errs[0] = b.multi(&zk.CreateRequest{Path: "/c0"}) })
	eventually(t, 5*time.Second, "the first request", func() bool { return len(f.sent()) == 1 })
	for i := 1; i < n; i++ {
		wg.Go(func() { res[i], errs[i] = b.multi(&zk.CreateRequest{Path: fmt.Sprintf("/c%d", i)}) })
	}
	eventually(t, 5*time.Second, "the calls to queue", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.pending) == n-1
	})
	close(f.release)
	wg.Wait()
	return res, errs
}

// TestBatcherSendsPiledUpCallsTogether: calls that come while a multi is
// on its way go in one multi, and each gets its own results.
func TestBatcherSendsPiledUpCallsTogether(t *testing.T) {
	f := &fakeMulti{}
	b := &batcher{send: f.send}
	res, errs := pileUp(t, b, f, 6)
	if got := len(f.sent()); got != 2 {
		t.Fatalf("%d requests for 6 calls, want 2: the first, then the other 5 together", got)
	}
	for i := range res {
		if errs[i] != nil || len(res[i]) != 1 || res[i][0].String != fmt.Sprintf("/c%d", i) {
			t.Fatalf("call %d: %+v %v", i, res[i], errs[i])
		}
	}
}

// TestBatcherSendsAFailedBatchCallByCall: an op that fails fails the whole
// multi, so each call is sent again alone and gets its own answer.
func TestBatcherSendsAFailedBatchCallByCall(t *testing.T) {
	f := &fakeMulti{fail: map[string]error{"/c3": zk.ErrNoNode}}
	b := &batcher{send: f.send}
	res, errs := pileUp(t, b, f, 5)
	for i := range res {
		if i == 3 {
			if !errors.Is(errs[i], zk.ErrNoNode) {
				t.Fatalf("call 3: %v, want its own ErrNoNode", errs[i])
			}
			continue
		}
		if errs[i] != nil || res[i][0].String != fmt.Sprintf("/c%d", i) {
			t.Fatalf("call %d: %+v %v; want created", i, res[i], errs[i])
		}
	}
	if got := len(f.sent()); got != 1+1+4 {
		t.Fatalf("%d requests, want 6: the first, the failed batch of 4, then its calls alone", got)
	}
}

// TestBatcherConnectionFailure: a batch cut off by the connection gives
// every call the error.
func TestBatcherConnectionFailure(t *testing.T) {
	f := &fakeMulti{down: zk.ErrConnectionClosed}
	b := &batcher{send: f.send}
	_, errs := pileUp(t, b, f, 4)
	for i, err := range errs {
		if !errors.Is(err, zk.ErrConnectionClosed) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := len(f.sent()); got != 2 {
		t.Fatalf("%d requests, want 2", got)
	}
}

// TestBatcherDeletesAloneWithDelete: a delete that goes alone is a plain
// delete, not a multi.
func TestBatcherDeletesAloneWithDelete(t *testing.T) {
	f := &fakeMulti{}
	var deleted []string
	b := &batcher{send: f.send, del: func(p string, _ int32) error {
		deleted = append(deleted, p)
		if p == "/gone" {
			return zk.ErrNoNode
		}
		return nil
	}}
	if res, err := b.multi(&zk.DeleteRequest{Path: "/n", Version: -1}); multiErr(res, err, 1) != nil {
		t.Fatalf("delete /n: %v", err)
	}
	if res, err := b.multi(&zk.DeleteRequest{Path: "/gone", Version: -1}); !errors.Is(multiErr(res, err, 1), zk.ErrNoNode) {
		t.Fatalf("delete /gone: %v, want ErrNoNode", err)
	}
	if len(f.sent()) != 0 || len(deleted) != 2 {
		t.Fatalf("multis %v, deletes %v", f.sent(), deleted)
	}
}
