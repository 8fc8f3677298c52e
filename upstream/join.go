package upstream

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Clients' channels and patterns on a node (Join, Leave, Publish): they
// share the Subscription's one connection with the release notifications,
// so an instance holds one pub/sub connection per node however many
// clients subscribe. go-redis remembers what was joined and subscribes it
// again on every new connection.

// joinKey names a channel or a pattern in Subscription's tables.
func joinKey(name string, pattern bool) string {
	if pattern {
		return "p" + name
	}
	return "c" + name
}

// Join subscribes the node to a channel (pattern false) or a glob pattern
// and returns a channel closed once the node confirmed it. If the node is
// unreachable now, it is subscribed when it comes back; err says the
// command did not go out this time.
func (s *Subscription) Join(ctx context.Context, name string, pattern bool) (<-chan struct{}, error) {
	k := joinKey(name, pattern)
	done := make(chan struct{})
	s.mu.Lock()
	s.waiting[k] = append(s.waiting[k], done)
	s.mu.Unlock()
	if pattern {
		return done, s.ps.PSubscribe(ctx, name)
	}
	return done, s.ps.Subscribe(ctx, name)
}

// Leave unsubscribes the node from what Join added and returns a channel
// closed once the node confirmed it. The release channel stays subscribed
// for the release notifications (its channel is closed at once).
//
// Messages on the release channel never reach the Message handler, even
// through a pattern that matches it: they name lock tokens. Callers should
// refuse a client's SUBSCRIBE or PUBLISH on it (ReleasedChannel).
func (s *Subscription) Leave(ctx context.Context, name string, pattern bool) (<-chan struct{}, error) {
	k := joinKey(name, pattern)
	done := make(chan struct{})
	s.mu.Lock()
	delete(s.waiting, k)
	if !pattern && name == s.channel {
		s.mu.Unlock()
		close(done)
		return done, nil
	}
	s.waiting["u"+k] = append(s.waiting["u"+k], done)
	s.mu.Unlock()
	if pattern {
		return done, s.ps.PUnsubscribe(ctx, name)
	}
	return done, s.ps.Unsubscribe(ctx, name)
}

// Connected reports whether the node confirmed the subscription on the
// current connection; a broken connection reads as connected until the
// Subscription noticed (DefaultPingAfter, then RedisOptions.Timeout).
func (s *Subscription) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.up:
		return true
	default:
		return false
	}
}

// ReleasedChannel is the channel of release notifications for a key
// prefix (RedisOptions.Prefix; "" for the default).
func ReleasedChannel(prefix string) string {
	return releasedChannel(orDefault(prefix, DefaultPrefix))
}

// Publish publishes payload on channel on the node and returns the node's
// count of receivers.
func (s *Subscription) Publish(ctx context.Context, channel string, payload []byte) (int64, error) {
	return s.client.Publish(ctx, channel, payload).Result()
}

// confirmed wakes the Joins waiting for the node to confirm k.
func (s *Subscription) confirmed(k string) {
	s.mu.Lock()
	waiting := s.waiting[k]
	delete(s.waiting, k)
	s.mu.Unlock()
	for _, w := range waiting {
		close(w)
	}
}

// message hands a message on a joined channel or pattern to onMessage.
func (s *Subscription) message(m *redis.Message) {
	if s.onMessage != nil {
		s.onMessage(m.Pattern, m.Channel, []byte(m.Payload))
	}
}
