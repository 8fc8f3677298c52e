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

// Transport carries messages between the instances sharing a backend. The
// hub tells it which channels and patterns its clients listen to, and it
// hands every message it receives to the hub's Deliver, once.
type Transport interface {
	// Publish sends a message to every instance, this one included, and
	// returns the number of receivers it counts (the transport documents
	// which), or an error when it cannot know whether the message went out.
	Publish(ctx context.Context, channel string, payload []byte) (int64, error)
	// Listen and Forget start and stop receiving a channel (pattern
	// false) or a glob pattern.
	Listen(name string, pattern bool)
	Forget(name string, pattern bool)
}

// Hub is the instance's table of subscriptions.
type Hub struct {
	mu        sync.Mutex
	channels  map[string]map[Subscriber]struct{}
	patterns  map[string]map[Subscriber]struct{}
	transport Transport // nil: in-process only
}

// New returns a hub; t may be nil (messages stay in this process).
func New(t Transport) *Hub {
	return &Hub{channels: map[string]map[Subscriber]struct{}{}, patterns: map[string]map[Subscriber]struct{}{}, transport: t}
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
	first := subs == nil
	if first {
		subs = map[Subscriber]struct{}{}
		tab[name] = subs
	}
	subs[s] = struct{}{}
	h.mu.Unlock()
	if first && h.transport != nil {
		h.transport.Listen(name, pattern)
	}
}

// Unsubscribe removes s from name.
func (h *Hub) Unsubscribe(s Subscriber, name string, pattern bool) {
	h.mu.Lock()
	tab := h.table(pattern)
	subs := tab[name]
	delete(subs, s)
	last := subs != nil && len(subs) == 0
	if last {
		delete(tab, name)
	}
	h.mu.Unlock()
	if last && h.transport != nil {
		h.transport.Forget(name, pattern)
	}
}

// Publish sends payload on channel: through the transport when there is
// one (its count of receivers), else to this process's subscribers (their
// count, as Redis counts: one per matching subscription).
func (h *Hub) Publish(ctx context.Context, channel string, payload []byte) (int64, error) {
	if h.transport != nil {
		return h.transport.Publish(ctx, channel, payload)
	}
	return int64(h.Deliver(channel, payload)), nil
}

// Deliver hands a message to this process's subscribers of channel and of
// the patterns it matches, and returns how many deliveries it made. A
// Transport calls it for each message it receives.
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
