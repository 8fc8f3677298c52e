package pubsub

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// fakeRemote counts calls and fails Subscribe while fail is set.
type fakeRemote struct {
	mu         sync.Mutex
	subs, uns  int
	fail       bool
	subscribed map[string]bool
}

func (r *fakeRemote) Subscribe(ctx context.Context, name string, pattern bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs++
	if r.fail {
		return errors.New("NOQUORUM")
	}
	r.subscribed[name] = true
	return nil
}

func (r *fakeRemote) Unsubscribe(name string, pattern bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uns++
	delete(r.subscribed, name)
}

func (r *fakeRemote) Publish(ctx context.Context, channel string, payload []byte) (int64, error) {
	return 0, nil
}

type sink struct {
	mu  sync.Mutex
	got []string
}

func (s *sink) Deliver(pattern, channel string, payload []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, pattern+"|"+channel+"|"+string(payload))
}

// TestHubRemote: concurrent first subscribers subscribe the remote once;
// the last one leaving unsubscribes it; a failed remote subscription
// leaves the subscriber out and the remote cleaned.
func TestHubRemote(t *testing.T) {
	ctx := context.Background()
	r := &fakeRemote{subscribed: map[string]bool{}}
	h := NewRemote(r, NewDedup(3, 0, 0))
	subs := make([]*sink, 8)
	var wg sync.WaitGroup
	for i := range subs {
		subs[i] = &sink{}
		wg.Go(func() {
			if err := h.Subscribe(ctx, subs[i], "ch", false); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if r.subs != 1 || !r.subscribed["ch"] {
		t.Fatalf("remote subscribed %d times, want 1", r.subs)
	}
	for n := range 3 {
		h.FromNode(n, "", "ch", []byte("m"))
	}
	for i, s := range subs {
		if len(s.got) != 1 {
			t.Fatalf("subscriber %d got %v, want one message", i, s.got)
		}
	}
	for _, s := range subs {
		h.Unsubscribe(s, "ch", false)
	}
	if r.uns != 1 || r.subscribed["ch"] {
		t.Fatalf("remote unsubscribed %d times, want 1", r.uns)
	}
	r.fail = true
	s := &sink{}
	if err := h.Subscribe(ctx, s, "x", false); err == nil {
		t.Fatal("a failed remote subscription succeeded")
	}
	h.FromNode(0, "", "x", []byte("m"))
	if len(s.got) != 0 || r.uns != 2 {
		t.Fatalf("after a failed subscription: got %v, %d unsubscribes", s.got, r.uns)
	}
	r.fail = false
	if err := h.Subscribe(ctx, s, "x", false); err != nil || r.subs != 3 {
		t.Fatalf("subscribing again: %v, %d remote subscribes", err, r.subs)
	}
}
