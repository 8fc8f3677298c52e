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

// Remote carries subscriptions and messages through the nodes that every
// instance shares. Messages it receives go to Hub.FromNode.
type Remote interface {
	// Subscribe starts receiving a channel (pattern false) or a glob
	// pattern and returns once enough nodes confirmed it (the Remote says
	// how many), or an error.
	Subscribe(ctx context.Context, name string, pattern bool) error
	// Unsubscribe stops receiving it, without waiting.
	Unsubscribe(name string, pattern bool)
	// Publish sends a message through the nodes, to every instance this
	// one included, and returns the receivers it counts (the Remote
	// documents which), or an error when it cannot say it went out.
	Publish(ctx context.Context, channel string, payload []byte) (int64, error)
}

// topic is one channel or pattern this instance's clients listen to.
type topic struct {
	op     sync.Mutex // held while the topic subscribes or unsubscribes on the remote
	subs   map[Subscriber]struct{}
	remote bool // subscribed on the remote
	dead   bool // removed from the hub's table: start again with a new topic
}

// Hub is the instance's table of subscriptions.
type Hub struct {
	remote Remote // nil: this process only
	dedup  *Dedup // nil without remote

	mu       sync.Mutex
	channels map[string]*topic
	patterns map[string]*topic
}

// New returns an empty hub for this process only.
func New() *Hub {
	return &Hub{channels: map[string]*topic{}, patterns: map[string]*topic{}}
}

// NewRemote returns an empty hub that subscribes and publishes through r,
// whose messages from nodes numbered 0..nodes-1 it deduplicates with d.
func NewRemote(r Remote, d *Dedup) *Hub {
	h := New()
	h.remote, h.dedup = r, d
	return h
}

func (h *Hub) table(pattern bool) map[string]*topic {
	if pattern {
		return h.patterns
	}
	return h.channels
}

// Subscribe adds s to name (a channel, or a glob pattern). The first
// subscriber of a name subscribes it on the remote; until the remote
// confirmed, others wait for it. On error s is not subscribed.
func (h *Hub) Subscribe(ctx context.Context, s Subscriber, name string, pattern bool) error {
	for {
		h.mu.Lock()
		tab := h.table(pattern)
		t := tab[name]
		if t == nil {
			t = &topic{subs: map[Subscriber]struct{}{}}
			tab[name] = t
		}
		if t.remote || h.remote == nil {
			t.subs[s] = struct{}{}
			h.mu.Unlock()
			return nil
		}
		h.mu.Unlock()
		done, err := h.join(ctx, t, s, name, pattern)
		if done {
			return err
		}
	}
}

// join subscribes t on the remote unless another subscriber did meanwhile,
// then adds s. It returns false when t was removed meanwhile.
func (h *Hub) join(ctx context.Context, t *topic, s Subscriber, name string, pattern bool) (bool, error) {
	t.op.Lock()
	defer t.op.Unlock()
	if t.dead {
		return false, nil
	}
	if !t.remote {
		if err := h.remote.Subscribe(ctx, name, pattern); err != nil {
			h.mu.Lock()
			if len(t.subs) == 0 {
				t.dead = true
				delete(h.table(pattern), name)
			}
			h.mu.Unlock()
			h.remote.Unsubscribe(name, pattern) // the nodes that did confirm
			return true, err
		}
	}
	h.mu.Lock()
	t.remote = true
	t.subs[s] = struct{}{}
	h.mu.Unlock()
	return true, nil
}

// Unsubscribe removes s from name; the last subscriber's leaving
// unsubscribes it on the remote.
func (h *Hub) Unsubscribe(s Subscriber, name string, pattern bool) {
	h.mu.Lock()
	t := h.table(pattern)[name]
	if t == nil {
		h.mu.Unlock()
		return
	}
	delete(t.subs, s)
	empty := len(t.subs) == 0
	h.mu.Unlock()
	if !empty {
		return
	}
	t.op.Lock()
	defer t.op.Unlock()
	h.mu.Lock()
	if t.dead || len(t.subs) > 0 {
		h.mu.Unlock()
		return
	}
	t.dead = true
	delete(h.table(pattern), name)
	h.mu.Unlock()
	if t.remote {
		h.remote.Unsubscribe(name, pattern)
	}
}

// Publish sends payload on channel. Without a remote it reaches this
// process's subscribers and returns their count, as Redis counts: one per
// matching subscription. With one, the remote's count and error.
func (h *Hub) Publish(ctx context.Context, channel string, payload []byte) (int64, error) {
	if h.remote != nil {
		return h.remote.Publish(ctx, channel, payload)
	}
	return int64(h.Deliver(channel, payload)), nil
}

// FromNode hands over a message node sent: on a channel this instance
// subscribed (pattern "") or on one matching a subscribed pattern. The
// first copy of it from any node is delivered, the others dropped (Dedup).
//
// A channel message goes to the channel's subscribers and then to those of
// every pattern it matches, in Redis's order whatever order a node sends
// them in; a pattern message then only serves a channel this instance does
// not subscribe to.
func (h *Hub) FromNode(node int, pattern, channel string, payload []byte) {
	if pattern != "" {
		h.mu.Lock()
		t, p := h.channels[channel], h.patterns[pattern]
		covered := t != nil && t.remote
		var out []Subscriber
		if p != nil && !covered {
			for s := range p.subs {
				out = append(out, s)
			}
		}
		h.mu.Unlock()
		if len(out) == 0 || h.dedup != nil && !h.dedup.First(node, pattern, channel, payload) {
			return
		}
		for _, s := range out {
			s.Deliver(pattern, channel, payload)
		}
		return
	}
	if h.dedup != nil && !h.dedup.First(node, "", channel, payload) {
		return
	}
	h.Deliver(channel, payload)
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
	if t := h.channels[channel]; t != nil {
		for s := range t.subs {
			out = append(out, delivery{s, ""})
		}
	}
	for p, t := range h.patterns {
		if Match(p, channel) {
			for s := range t.subs {
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
