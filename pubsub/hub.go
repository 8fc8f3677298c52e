package pubsub

import (
	"context"
	"slices"
	"sync"
)

// Kind is what a subscription names.
type Kind int

const (
	Channel Kind = iota // a channel (SUBSCRIBE, PUBLISH)
	Pattern             // a glob pattern of channels (PSUBSCRIBE)
	Shard               // a shard channel (SSUBSCRIBE, SPUBLISH)
)

// kinds is the number of Kinds.
const kinds = 3

// Subscriber receives the messages of its channels, patterns and shard
// channels. Its methods are called from any goroutine and must not block.
type Subscriber interface {
	// Deliver hands over one message of a channel or pattern
	// subscription; pattern is "" for a channel subscription.
	Deliver(pattern, channel string, payload []byte)
	// DeliverShard hands over one message of a shard channel. On a Redis
	// that is not a cluster, shard channels are a namespace of their own:
	// SPUBLISH reaches SSUBSCRIBE subscribers only, PUBLISH never does.
	DeliverShard(channel string, payload []byte)
}

// Remote carries subscriptions and messages through the nodes that every
// instance shares. Messages it receives go to Hub.FromNode.
type Remote interface {
	// Subscribe starts receiving a channel, a glob pattern or a shard
	// channel and returns once enough nodes confirmed it (the Remote says
	// how many), or an error.
	Subscribe(ctx context.Context, name string, kind Kind) error
	// Unsubscribe stops receiving it, without waiting.
	Unsubscribe(name string, kind Kind)
	// Publish sends a message through the nodes (kind Channel: PUBLISH;
	// Shard: SPUBLISH), to every instance this one included, and returns
	// the receivers it counts (the Remote documents which), or an error
	// when it cannot say it went out.
	Publish(ctx context.Context, kind Kind, channel string, payload []byte) (int64, error)
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
	dedup  *Dedup // channel and pattern messages; nil without remote
	shards *Dedup // shard channel messages; nil without remote

	mu     sync.Mutex
	topics [kinds]map[string]*topic // by Kind
}

// New returns an empty hub for this process only.
func New() *Hub {
	h := &Hub{}
	for k := range h.topics {
		h.topics[k] = map[string]*topic{}
	}
	return h
}

// NewRemote returns an empty hub that subscribes and publishes through r,
// whose messages from nodes numbered 0..nodes-1 it deduplicates with d
// (channels and patterns) and shards (shard channels, which the nodes send
// on connections of their own).
func NewRemote(r Remote, d, shards *Dedup) *Hub {
	h := New()
	h.remote, h.dedup, h.shards = r, d, shards
	return h
}

func (h *Hub) table(kind Kind) map[string]*topic { return h.topics[kind] }

// remoteFor is the remote that carries kind; nil: this process only. A hub
// made with no shards Dedup keeps shard channels in this process.
func (h *Hub) remoteFor(kind Kind) Remote {
	if kind == Shard && h.shards == nil {
		return nil
	}
	return h.remote
}

// Subscribe adds s to name (a channel, a glob pattern or a shard channel). The first
// subscriber of a name subscribes it on the remote; until the remote
// confirmed, others wait for it. On error s is not subscribed.
func (h *Hub) Subscribe(ctx context.Context, s Subscriber, name string, kind Kind) error {
	for {
		h.mu.Lock()
		tab := h.table(kind)
		t := tab[name]
		if t == nil {
			t = &topic{subs: map[Subscriber]struct{}{}}
			tab[name] = t
		}
		if t.remote || h.remoteFor(kind) == nil {
			t.subs[s] = struct{}{}
			h.mu.Unlock()
			return nil
		}
		h.mu.Unlock()
		done, err := h.join(ctx, t, s, name, kind)
		if done {
			return err
		}
	}
}

// join subscribes t on the remote unless another subscriber did meanwhile,
// then adds s. It returns false when t was removed meanwhile.
func (h *Hub) join(ctx context.Context, t *topic, s Subscriber, name string, kind Kind) (bool, error) {
	t.op.Lock()
	defer t.op.Unlock()
	if t.dead {
		return false, nil
	}
	if !t.remote {
		if err := h.remote.Subscribe(ctx, name, kind); err != nil {
			h.mu.Lock()
			if len(t.subs) == 0 {
				t.dead = true
				delete(h.table(kind), name)
			}
			h.mu.Unlock()
			h.remote.Unsubscribe(name, kind) // the nodes that did confirm
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
func (h *Hub) Unsubscribe(s Subscriber, name string, kind Kind) {
	h.mu.Lock()
	t := h.table(kind)[name]
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
	delete(h.table(kind), name)
	h.mu.Unlock()
	if t.remote {
		h.remote.Unsubscribe(name, kind)
	}
}

// Publish sends payload on channel. Without a remote it reaches this
// process's subscribers and returns their count, as Redis counts: one per
// matching subscription. With one, the remote's count and error.
func (h *Hub) Publish(ctx context.Context, channel string, payload []byte) (int64, error) {
	if h.remote != nil {
		return h.remote.Publish(ctx, Channel, channel, payload)
	}
	return int64(h.Deliver(channel, payload)), nil
}

// SPublish sends payload on shard channel as Publish does: it reaches
// SSUBSCRIBE subscribers only, and counts them.
func (h *Hub) SPublish(ctx context.Context, channel string, payload []byte) (int64, error) {
	if r := h.remoteFor(Shard); r != nil {
		return r.Publish(ctx, Shard, channel, payload)
	}
	return int64(h.DeliverShard(channel, payload)), nil
}

// FromNodeShard hands over a message node sent on a shard channel this
// instance subscribed: the first copy from any node goes to the channel's
// subscribers, the others are dropped (Dedup).
func (h *Hub) FromNodeShard(node int, channel string, payload []byte) {
	if h.shards != nil && !h.shards.First(node, "", channel, payload) {
		return
	}
	h.DeliverShard(channel, payload)
}

// DeliverShard hands a message to this process's subscribers of shard
// channel and returns how many deliveries it made.
func (h *Hub) DeliverShard(channel string, payload []byte) int {
	var out []Subscriber
	h.mu.Lock()
	if t := h.topics[Shard][channel]; t != nil {
		for s := range t.subs {
			out = append(out, s)
		}
	}
	h.mu.Unlock()
	for _, s := range out {
		s.DeliverShard(channel, payload)
	}
	return len(out)
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
		t, p := h.topics[Channel][channel], h.topics[Pattern][pattern]
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
	if t := h.topics[Channel][channel]; t != nil {
		for s := range t.subs {
			out = append(out, delivery{s, ""})
		}
	}
	for p, t := range h.topics[Pattern] {
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

// Names lists, sorted, the channels (kind Channel) or shard channels
// (Shard) that at least one of this process's subscribers listens to and
// that match the glob pattern; every one when all. (PUBSUB CHANNELS and
// SHARDCHANNELS: what one Redis reports of its own clients.)
func (h *Hub) Names(kind Kind, pattern string, all bool) []string {
	h.mu.Lock()
	var out []string
	for name, t := range h.topics[kind] {
		if len(t.subs) > 0 && (all || Match(pattern, name)) {
			out = append(out, name)
		}
	}
	h.mu.Unlock()
	slices.Sort(out)
	return out
}

// NumSub is the number of this process's subscribers of a channel or a
// shard channel (PUBSUB NUMSUB and SHARDNUMSUB).
func (h *Hub) NumSub(kind Kind, name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[kind][name]; t != nil {
		return len(t.subs)
	}
	return 0
}

// NumPat is the number of distinct patterns this process's subscribers
// listen to (PUBSUB NUMPAT).
func (h *Hub) NumPat() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, t := range h.topics[Pattern] {
		if len(t.subs) > 0 {
			n++
		}
	}
	return n
}
