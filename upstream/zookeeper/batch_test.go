package zookeeper

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// fakeMulti stands in for a connection's Multi: it answers each create
// with its path and fails the ops whose path is in fail; until release is
// closed, requests wait for it, so that calls pile up behind them.
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
	release := f.release
	f.mu.Unlock()
	if release != nil {
		<-release
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

// pileUp runs n calls of one create each, "/c0".."/c<n-1>", on b: the
// first maxSending go out alone and are held, the rest pile up behind
// them; then it lets them go and returns each call's answer.
func pileUp(t *testing.T, b *batcher, f *fakeMulti, n int) ([][]zk.MultiResponse, []error) {
	t.Helper()
	release := make(chan struct{})
	f.mu.Lock()
	f.release = release
	f.mu.Unlock()
	res, errs := make([][]zk.MultiResponse, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i], errs[i] = b.multi(&zk.CreateRequest{Path: fmt.Sprintf("/c%d", i)}) })
		if i < maxSending {
			eventually(t, 5*time.Second, "the request of call "+strconv.Itoa(i), func() bool { return len(f.sent()) == i+1 })
		}
	}
	eventually(t, 5*time.Second, "the calls to queue", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.pending) == n-maxSending
	})
	if got := len(f.sent()); got != maxSending {
		t.Fatalf("%d requests on their way, want %d", got, maxSending)
	}
	f.mu.Lock()
	f.release = nil
	f.mu.Unlock()
	close(release)
	wg.Wait()
	return res, errs
}

// TestBatcherSendsPiledUpCallsTogether: calls that come while a multi is
// on its way go in one multi, and each gets its own results.
func TestBatcherSendsPiledUpCallsTogether(t *testing.T) {
	f := &fakeMulti{}
	b := &batcher{send: f.send}
	res, errs := pileUp(t, b, f, 7)
	if got := len(f.sent()); got != maxSending+1 {
		t.Fatalf("%d requests for 7 calls, want %d: the first %d alone, then the other %d together", got, maxSending+1, maxSending, 7-maxSending)
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
	if got, want := len(f.sent()), maxSending+1+(5-maxSending); got != want {
		t.Fatalf("%d requests, want %d: the first %d alone, the failed batch of the other %d, then its calls alone", got, want, maxSending, 5-maxSending)
	}
}

// TestBatcherConnectionFailure: a batch cut off by the connection gives
// every call the error.
func TestBatcherConnectionFailure(t *testing.T) {
	f := &fakeMulti{down: zk.ErrConnectionClosed}
	b := &batcher{send: f.send}
	_, errs := pileUp(t, b, f, 5)
	for i, err := range errs {
		if !errors.Is(err, zk.ErrConnectionClosed) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := len(f.sent()); got != maxSending+1 {
		t.Fatalf("%d requests, want %d", got, maxSending+1)
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

// TestBatcherOneSequentialCreatePerParent: a multi creates at most one
// sequential node under each parent, since the nodes it creates share its
// zxid, their fence; the calls after the first that would make a second
// wait for the next multi, in order.
func TestBatcherOneSequentialCreatePerParent(t *testing.T) {
	seq := func(p string) *batchCall {
		return &batchCall{ops: []any{&zk.CreateRequest{Path: p, Flags: zk.FlagSequence}, &zk.SetDataRequest{Path: "/k"}}}
	}
	del := &batchCall{ops: []any{&zk.DeleteRequest{Path: "/k/x", Version: 3}}}
	calls := []*batchCall{seq("/k/a-"), seq("/j/a-"), del, seq("/k/b-"), seq("/j/c-")}
	b := &batcher{pending: calls}
	if got := b.take(); len(got) != 3 || got[0] != calls[0] || got[2] != del {
		t.Fatalf("first multi: %d calls, want the first 3", len(got))
	}
	if got := b.take(); len(got) != 2 || got[0] != calls[3] || got[1] != calls[4] {
		t.Fatalf("second multi: %d calls, want the last 2", len(got))
	}
	if got := b.take(); len(got) != 0 {
		t.Fatalf("third multi: %d calls, want none", len(got))
	}
}

// TestBatcherLoneCallLeavesNoSender: a call that finds nothing else
// pending sends its multi on its own goroutine and, once answered, leaves
// no sender behind — no goroutine is started to look for more (one per
// request at concurrency 1 cost lockproxy about half its CPU per cycle).
func TestBatcherLoneCallLeavesNoSender(t *testing.T) {
	f := &fakeMulti{}
	b := &batcher{send: f.send}
	for i := range 200 {
		if res, err := b.multi(&zk.CreateRequest{Path: "/c" + strconv.Itoa(i)}); multiErr(res, err, 1) != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		b.mu.Lock()
		sending := b.sending
		b.mu.Unlock()
		if sending != 0 {
			t.Fatalf("call %d answered with %d senders left, want 0", i, sending)
		}
	}
	if got := len(f.sent()); got != 200 {
		t.Fatalf("%d requests for 200 lone calls", got)
	}
}

// TestBatcherBurstAsLoneCallAnswered: a lone call's multi is answered
// while a burst of calls arrives (they come during its request, and are
// queued or sent when it returns). Whether the other sender's slot is free
// or taken by a call held on its way, every call of the burst is sent and
// answered — none is left queued with no sender (the lone call starts no
// goroutine only when nothing is pending) — and no sender is left after.
func TestBatcherBurstAsLoneCallAnswered(t *testing.T) {
	for _, slotTaken := range []bool{false, true} {
		for _, n := range []int{1, 2, 5, maxBatch + 3} {
			t.Run(fmt.Sprintf("taken=%v/burst=%d", slotTaken, n), func(t *testing.T) {
				f := &fakeMulti{}
				b := &batcher{}
				heldGo := make(chan struct{})
				var burst sync.WaitGroup
				errs := make(chan error, n)
				queued := func() int { // burst calls pending or sent
					b.mu.Lock()
					k := 0
					for _, c := range b.pending {
						k += len(c.ops)
					}
					b.mu.Unlock()
					for _, ops := range f.sent() {
						for _, op := range ops {
							if p := op.(*zk.CreateRequest).Path; p != "/lone" && p != "/held" {
								k++
							}
						}
					}
					return k
				}
				b.send = func(ops ...any) ([]zk.MultiResponse, error) {
					switch ops[0].(*zk.CreateRequest).Path {
					case "/held":
						<-heldGo
					case "/lone":
						for i := range n {
							burst.Go(func() {
								res, err := b.multi(&zk.CreateRequest{Path: fmt.Sprintf("/b%d", i)})
								errs <- multiErr(res, err, 1)
							})
						}
						eventually(t, 5*time.Second, "the burst queued or sent", func() bool { return queued() == n })
					}
					return f.send(ops...)
				}
				held := make(chan error, 1)
				if slotTaken {
					go func() {
						res, err := b.multi(&zk.CreateRequest{Path: "/held"})
						held <- multiErr(res, err, 1)
					}()
					eventually(t, 5*time.Second, "the held call on its way", func() bool {
						return len(f.sent()) == 0 && func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.sending == 1 && len(b.pending) == 0 }()
					})
				}
				if res, err := b.multi(&zk.CreateRequest{Path: "/lone"}); multiErr(res, err, 1) != nil {
					t.Fatalf("lone call: %v", err)
				}
				answered := make(chan struct{})
				go func() { burst.Wait(); close(answered) }()
				select {
				case <-answered:
				case <-time.After(5 * time.Second):
					t.Fatalf("burst of %d: %d calls answered in 5s, the rest left queued", n, len(errs))
				}
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				close(heldGo)
				if slotTaken {
					if err := <-held; err != nil {
						t.Fatal(err)
					}
				}
				eventually(t, 5*time.Second, "no sender left", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.sending == 0 })
			})
		}
	}
}
