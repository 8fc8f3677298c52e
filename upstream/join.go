package upstream

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Clients' channels and patterns on a node (Join, Leave, Publish): they
// share the Subscription's one connection with the release notifications,
// so an instance holds one pub/sub connection per node however many
// clients subscribe. Clients' shard channels (JoinShard, LeaveShard,
// SPublish) have a second connection, dialled on the first JoinShard (a
// shard channel's message looks like a channel's in go-redis). go-redis
// remembers what was joined and subscribes it again on every new
// connection.

// joinKey names a channel or a pattern in Subscription's tables.
func joinKey(name string, pattern bool) string {
	if pattern {
		return "p" + name
	}
	return "c" + name
}

// shardKey names a shard channel in Subscription's tables.
func shardKey(name string) string { return "s" + name }

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
		return done, s.main.ps.PSubscribe(ctx, name)
	}
	return done, s.main.ps.Subscribe(ctx, name)
}

// JoinShard subscribes the node to a shard channel (SSUBSCRIBE) as Join
// does, on the Subscription's shard connection, which it dials the first
// time. Messages go to the ShardMessage handler; the release channel's
// never do (nobody publishes there as a shard channel, and callers should
// refuse it).
func (s *Subscription) JoinShard(ctx context.Context, name string) (<-chan struct{}, error) {
	k := shardKey(name)
	done := make(chan struct{})
	s.mu.Lock()
	s.waiting[k] = append(s.waiting[k], done)
	s.mu.Unlock()
	s.startShard()
	return done, s.shard.ps.SSubscribe(ctx, name)
}

// LeaveShard unsubscribes the node from what JoinShard added, as Leave.
func (s *Subscription) LeaveShard(ctx context.Context, name string) (<-chan struct{}, error) {
	k := shardKey(name)
	done := make(chan struct{})
	s.mu.Lock()
	delete(s.waiting, k)
	if name == s.channel {
		s.mu.Unlock()
		close(done)
		return done, nil
	}
	s.waiting["u"+k] = append(s.waiting["u"+k], done)
	s.mu.Unlock()
	return done, s.shard.ps.SUnsubscribe(ctx, name)
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
		return done, s.main.ps.PUnsubscribe(ctx, name)
	}
	return done, s.main.ps.Unsubscribe(ctx, name)
}

// Connected reports whether the node confirmed the subscription on the
// current connection; a broken connection reads as connected until the
// Subscription noticed (DefaultPingAfter, then RedisOptions.Timeout).
func (s *Subscription) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.main.up:
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

// SPublish publishes payload on shard channel on the node and returns the
// node's count of receivers (its SSUBSCRIBE subscribers).
func (s *Subscription) SPublish(ctx context.Context, channel string, payload []byte) (int64, error) {
	return s.client.SPublish(ctx, channel, payload).Result()
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
