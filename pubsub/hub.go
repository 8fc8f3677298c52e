package pubsub

import (
	"context"
	"sync"
)

// Subscriber receives the messages of its channels and patterns. Deliver
// is called from any goroutine and must not block.
type Subscriber interface {
	// Deliver hands over one message; pattern is "" for a channel
	// subscription.
	Deliver(pattern, channel string, payload []byte)
}

// Hub is the instance's table of subscriptions.
type Hub struct {
	mu       sync.Mutex
	channels map[string]map[Subscriber]struct{}
	patterns map[string]map[Subscriber]struct{}
}

// New returns an empty hub.
func New() *Hub {
	return &Hub{channels: map[string]map[Subscriber]struct{}{}, patterns: map[string]map[Subscriber]struct{}{}}
}

func (h *Hub) table(pattern bool) map[string]map[Subscriber]struct{} {
	if pattern {
		return h.patterns
	}
	return h.channels
}

// Subscribe adds s to name (a channel, or a glob pattern).
func (h *Hub) Subscribe(s Subscriber, name string, pattern bool) {
	h.mu.Lock()
	tab := h.table(pattern)
	subs := tab[name]
	if subs == nil {
		subs = map[Subscriber]struct{}{}
		tab[name] = subs
	}
	subs[s] = struct{}{}
	h.mu.Unlock()
}

// Unsubscribe removes s from name.
func (h *Hub) Unsubscribe(s Subscriber, name string, pattern bool) {
	h.mu.Lock()
	tab := h.table(pattern)
	subs := tab[name]
	delete(subs, s)
	if subs != nil && len(subs) == 0 {
		delete(tab, name)
	}
	h.mu.Unlock()
}

// Publish sends payload on channel to this process's subscribers and
// returns their count, as Redis counts: one per matching subscription.
// Messages do not yet travel between instances.
func (h *Hub) Publish(ctx context.Context, channel string, payload []byte) (int64, error) {
	return int64(h.Deliver(channel, payload)), nil
}

// Deliver hands a message to this process's subscribers of channel and of
// the patterns it matches, and returns how many deliveries it made.
func (h *Hub) Deliver(channel string, payload []byte) int {
	type delivery struct {
		s       Subscriber
		pattern string
	}
	var out []delivery
	h.mu.Lock()
	for s := range h.channels[channel] {
		out = append(out, delivery{s, ""})
	}
	for p, subs := range h.patterns {
		if Match(p, channel) {
			for s := range subs {
				out = append(out, delivery{s, p})
			}
		}
	}
	h.mu.Unlock()
	for _, d := range out {
		d.s.Deliver(d.pattern, channel, payload)
	}
	return len(out)
}
