package pubsub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// fakeRemote counts calls and fails Subscribe while fail is set.
type fakeRemote struct {
	mu         sync.Mutex
	subs, uns  int
	fail       bool
	subscribed map[string]bool // by Kind and name
	published  []string
}

func (r *fakeRemote) Subscribe(ctx context.Context, name string, kind Kind) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs++
	if r.fail {
		return errors.New("NOQUORUM")
	}
	r.subscribed[fmt.Sprint(kind, name)] = true
	return nil
}

func (r *fakeRemote) Unsubscribe(name string, kind Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uns++
	delete(r.subscribed, fmt.Sprint(kind, name))
}

func (r *fakeRemote) Publish(ctx context.Context, kind Kind, channel string, payload []byte) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.published = append(r.published, fmt.Sprint(kind, channel))
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

func (s *sink) DeliverShard(channel string, payload []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, "shard|"+channel+"|"+string(payload))
}

// TestHubRemote: concurrent first subscribers subscribe the remote once;
// the last one leaving unsubscribes it; a failed remote subscription
// leaves the subscriber out and the remote cleaned.
func TestHubRemote(t *testing.T) {
	ctx := context.Background()
	r := &fakeRemote{subscribed: map[string]bool{}}
	h := NewRemote(r, NewDedup(3, 0, 0), NewDedup(3, 0, 0))
	subs := make([]*sink, 8)
	var wg sync.WaitGroup
	for i := range subs {
		subs[i] = &sink{}
		wg.Go(func() {
			if err := h.Subscribe(ctx, subs[i], "ch", Channel); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if r.subs != 1 || !r.subscribed[fmt.Sprint(Channel, "ch")] {
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
		h.Unsubscribe(s, "ch", Channel)
	}
	if r.uns != 1 || r.subscribed[fmt.Sprint(Channel, "ch")] {
		t.Fatalf("remote unsubscribed %d times, want 1", r.uns)
	}
	r.fail = true
	s := &sink{}
	if err := h.Subscribe(ctx, s, "x", Channel); err == nil {
		t.Fatal("a failed remote subscription succeeded")
	}
	h.FromNode(0, "", "x", []byte("m"))
	if len(s.got) != 0 || r.uns != 2 {
		t.Fatalf("after a failed subscription: got %v, %d unsubscribes", s.got, r.uns)
	}
	r.fail = false
	if err := h.Subscribe(ctx, s, "x", Channel); err != nil || r.subs != 3 {
		t.Fatalf("subscribing again: %v, %d remote subscribes", err, r.subs)
	}
}

// TestHubShards: shard channels are a namespace of their own, as on a
// Redis 7.0 that is not a cluster: a shard subscriber gets what SPUBLISH
// and the nodes' shard messages carry, once however many nodes send it,
// and nothing a channel or pattern carries; a channel subscriber of the
// same name gets nothing of the shard channel. Without a shards Dedup the
// hub keeps shard channels in this process.
func TestHubShards(t *testing.T) {
	ctx := context.Background()
	r := &fakeRemote{subscribed: map[string]bool{}}
	h := NewRemote(r, NewDedup(3, 0, 0), NewDedup(3, 0, 0))
	shard, plain, pat := &sink{}, &sink{}, &sink{}
	for _, sub := range []struct {
		s    *sink
		name string
		kind Kind
	}{{shard, "ch", Shard}, {plain, "ch", Channel}, {pat, "c*", Pattern}} {
		if err := h.Subscribe(ctx, sub.s, sub.name, sub.kind); err != nil {
			t.Fatal(err)
		}
	}
	if !r.subscribed[fmt.Sprint(Shard, "ch")] || !r.subscribed[fmt.Sprint(Channel, "ch")] {
		t.Fatalf("remote subscriptions %v", r.subscribed)
	}
	for n := range 3 {
		h.FromNodeShard(n, "ch", []byte("s"))
		h.FromNode(n, "", "ch", []byte("m"))
	}
	if fmt.Sprint(shard.got) != "[shard|ch|s]" || fmt.Sprint(plain.got) != "[|ch|m]" || fmt.Sprint(pat.got) != "[c*|ch|m]" {
		t.Fatalf("shard %v, channel %v, pattern %v", shard.got, plain.got, pat.got)
	}
	if _, err := h.SPublish(ctx, "ch", []byte("x")); err != nil || fmt.Sprint(r.published) != fmt.Sprint([]string{fmt.Sprint(Shard, "ch")}) {
		t.Fatalf("SPublish went to the remote as %v, %v", r.published, err)
	}
	h.Unsubscribe(shard, "ch", Shard)
	if r.subscribed[fmt.Sprint(Shard, "ch")] || !r.subscribed[fmt.Sprint(Channel, "ch")] {
		t.Fatalf("after leaving the shard channel: %v", r.subscribed)
	}

	local := NewRemote(r, NewDedup(3, 0, 0), nil)
	s := &sink{}
	before := r.subs
	if err := local.Subscribe(ctx, s, "ch", Shard); err != nil || r.subs != before {
		t.Fatalf("a local shard subscription: %v, %d remote subscribes", err, r.subs-before)
	}
	if n, err := local.SPublish(ctx, "ch", []byte("l")); err != nil || n != 1 || fmt.Sprint(s.got) != "[shard|ch|l]" {
		t.Fatalf("local SPUBLISH: %d %v, got %v", n, err, s.got)
	}
	if n, _ := New().SPublish(ctx, "ch", []byte("l")); n != 0 {
		t.Fatalf("SPUBLISH with no subscriber counted %d", n)
	}
}
