package upstream

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Release notifications: release.lua publishes the key it deleted, as
// clients name it (without the prefix), on the node's channel
// "<prefix>released"; a Subscription hands them to a callback, so that lock
// waiters wake without polling. Expiries publish nothing.

// Health check and reconnection timing of a Subscription.
const (
	// DefaultPingAfter is how long a subscription waits on a quiet
	// connection before it sends PING; a connection that then answers
	// nothing within RedisOptions.Timeout is dropped and dialled again.
	DefaultPingAfter = 3 * time.Second
	minBackoff       = 50 * time.Millisecond // first wait after a failure
	maxBackoff       = time.Second           // the wait doubles up to this
)

// releasedChannel is the channel release.lua publishes on for a key prefix.
func releasedChannel(prefix string) string { return prefix + "released" }

// Subscription receives a node's release notifications. See Subscribe.
type Subscription struct {
	addr      string
	channel   string
	client    *redis.Client
	main      *line // SUBSCRIBE and PSUBSCRIBE: release notifications, clients' channels and patterns
	shard     *line // SSUBSCRIBE: clients' shard channels; its connection is dialled on the first JoinShard
	onRelease func(key, token string)
	onTaken   func(key, token string)                       // may be nil
	onMessage func(pattern, channel string, payload []byte) // may be nil
	onShard   func(channel string, payload []byte)          // may be nil
	log       *zap.Logger
	pingAfter time.Duration
	pongWait  time.Duration

	ctx       context.Context // ends at Close
	stop      context.CancelFunc
	stopped   chan struct{} // closed when the main line's goroutine has ended
	shardOnce sync.Once
	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	closed  bool                       // Close began: no shard line starts any more
	lines   sync.WaitGroup             // the shard line's goroutine; Add under mu while !closed
	waiting map[string][]chan struct{} // joinKey -> closed when the node confirms it
}

// line is one pub/sub connection of a Subscription to its node, with the
// goroutine that receives on it. The release channel is its anchor: the
// node's confirmation of it (SUBSCRIBE on the main line, SSUBSCRIBE on the
// shard line, where nobody publishes on it) tells a new connection is
// subscribed. go-redis keeps one connection per PubSub and cannot tell a
// shard channel's message from a channel's (both are a *redis.Message), so
// shard channels have a connection of their own.
type line struct {
	s     *Subscription
	ps    *redis.PubSub
	shard bool
	onUp  func(up bool) // may be nil
	what  string        // for the log

	up chan struct{} // closed while the current connection is subscribed; under s.mu
}

// Subscribe listens on the node at o.Addr for release notifications and
// calls onRelease with each released key and the token that released it
// (or the waiter that left the key's line), from one goroutine, in arrival
// order. It reconnects by itself after a failure (go-redis PubSub does);
// notifications published while it is disconnected are lost — callers must
// not rely on every one arriving. Close stops it.
//
// The channel is o.Prefix + "released". A connection quiet for
// DefaultPingAfter gets a PING; if nothing answers within o.Timeout (default
// 5s) it counts as broken. Failed attempts are retried after a wait that
// doubles from 50ms up to 1s. Outages and recoveries are logged at info
// level, further failed attempts at debug; log may be nil.
//
// onRelease must return promptly (while it runs, notifications queue up on
// the node, which drops a subscriber that falls far behind) and must not
// call Close.
func Subscribe(o RedisOptions, onRelease func(key, token string), log *zap.Logger) *Subscription {
	return subscribe(o, onRelease, log, DefaultPingAfter)
}

// SubscribeTaken is Subscribe that also calls onTaken, from the same
// goroutine, with each lock another instance announced it took from its
// holder (PublishTaken).
func SubscribeTaken(o RedisOptions, onRelease, onTaken func(key, token string), log *zap.Logger) *Subscription {
	return subscribeWith(o, onRelease, onTaken, log, DefaultPingAfter)
}

// takenTag starts a PublishTaken message: "taken:<length of token>:<token><key>".
// Instances that do not know it read no release in it (its start is not a length).
const takenTag = "taken:"

// PublishTaken announces on the node's channel that key, held by token,
// was released without its token (a DEL) through this instance, so that
// the instance that granted it can tell its holder. Best effort.
func (s *Subscription) PublishTaken(ctx context.Context, key, token string) error {
	return s.client.Publish(ctx, s.channel, takenTag+strconv.Itoa(len(token))+":"+token+key).Err()
}

func subscribe(o RedisOptions, onRelease func(key, token string), log *zap.Logger, pingAfter time.Duration) *Subscription {
	return subscribeWith(o, onRelease, nil, log, pingAfter)
}

func subscribeWith(o RedisOptions, onRelease, onTaken func(key, token string), log *zap.Logger, pingAfter time.Duration) *Subscription {
	return subscribeHandlers(o, Handlers{Released: onRelease, Taken: onTaken}, log, pingAfter)
}

// Handlers are what a Subscription calls, from its one goroutine, in
// arrival order; each must return promptly and must not call Close.
type Handlers struct {
	// Released receives each release notification (see Subscribe).
	Released func(key, token string)
	// Taken receives each PublishTaken announcement; may be nil.
	Taken func(key, token string)
	// Message receives what the node sends on the channels and patterns
	// added with Join: pattern is "" for a channel. May be nil.
	Message func(pattern, channel string, payload []byte)
	// Up is called with true each time the node confirmed the release
	// channel on a new connection (it has resubscribed everything joined
	// too, by then or just after), with false when a connection failed.
	// May be nil.
	Up func(up bool)
	// ShardMessage receives what the node sends on the shard channels
	// added with JoinShard. May be nil.
	ShardMessage func(channel string, payload []byte)
	// ShardUp is Up for the connection that carries the shard channels
	// (dialled on the first JoinShard). May be nil.
	ShardUp func(up bool)
}

// SubscribeHandlers is Subscribe with every handler: release
// notifications, and the clients' channels and patterns added with Join,
// all on one connection to the node.
func SubscribeHandlers(o RedisOptions, h Handlers, log *zap.Logger) *Subscription {
	return subscribeHandlers(o, h, log, DefaultPingAfter)
}

func subscribeHandlers(o RedisOptions, hs Handlers, log *zap.Logger, pingAfter time.Duration) *Subscription {
	o = o.withDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	ctx, stop := context.WithCancel(context.Background())
	client := redis.NewClient(o.clientOptions())
	s := &Subscription{
		addr:      o.Addr,
		channel:   releasedChannel(o.Prefix),
		client:    client,
		onRelease: hs.Released,
		onTaken:   hs.Taken,
		onMessage: hs.Message,
		onShard:   hs.ShardMessage,
		waiting:   map[string][]chan struct{}{},
		log:       log.With(zap.String("node", o.Addr), zap.String("channel", releasedChannel(o.Prefix))),
		pingAfter: pingAfter,
		pongWait:  o.Timeout,
		ctx:       ctx,
		stop:      stop,
		stopped:   make(chan struct{}),
	}
	// No channel yet: neither dials.
	s.main = &line{s: s, ps: client.Subscribe(ctx), onUp: hs.Up, what: "release notifications", up: make(chan struct{})}
	s.shard = &line{s: s, ps: client.SSubscribe(ctx), shard: true, onUp: hs.ShardUp, what: "shard channels", up: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		s.main.run(ctx)
	}()
	return s
}

// startShard starts the shard line's goroutine, once, unless Close began.
func (s *Subscription) startShard() {
	s.shardOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		s.lines.Add(1)
		go func() {
			defer s.lines.Done()
			s.shard.run(s.ctx)
		}()
	})
}

// Ready blocks until the subscription is established or ctx ends (for tests
// and start-up): until the node confirmed SUBSCRIBE on the current
// connection. While the subscription reconnects it waits again, though a
// broken connection reads as established until the subscription noticed.
// It returns ErrClosed once the subscription is closed.
func (s *Subscription) Ready(ctx context.Context) error {
	s.mu.Lock()
	up := s.main.up
	s.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-s.stopped:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the subscription, waits for its goroutine to end (so
// onRelease is not called after Close returns) and closes its connection.
// Calling it again returns the first result.
func (s *Subscription) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.stop()                 // aborts a dial or a backoff wait
		err := s.main.ps.Close() // aborts a blocked read
		serr := s.shard.ps.Close()
		<-s.stopped
		s.lines.Wait()
		s.closeErr = errors.Join(err, serr, s.client.Close())
	})
	return s.closeErr
}

// health is the receiving goroutine's view of its connection.
type health struct {
	pinged  time.Time     // when a PING went out that nothing has answered yet
	lostAt  time.Time     // when the current outage began; zero while subscribed
	fails   int           // failed attempts in the current outage
	backoff time.Duration // the wait before the next attempt
}

// run receives until Close. After a failure go-redis dials again and
// subscribes on the next receive; run only waits in between.
func (l *line) run(ctx context.Context) {
	defer l.setUp(false) // Ready reports ErrClosed from now on
	h := &health{lostAt: time.Now(), backoff: minBackoff}
	var err error // the anchor is kept for resubscribing even if it fails
	if l.shard {
		err = l.ps.SSubscribe(ctx, l.s.channel)
	} else {
		err = l.ps.Subscribe(ctx, l.s.channel)
	}
	for {
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.failed(h, err)
			if !sleep(ctx, h.backoff) {
				return
			}
			h.backoff = min(2*h.backoff, maxBackoff)
		}
		var msg any
		if msg, err = l.receive(ctx, h); err == nil {
			l.handle(h, msg)
		}
	}
}

// receive waits for the next message. A quiet connection gets a PING after
// pingAfter; if nothing at all arrives within pongWait of it, the read fails
// with a deadline, which go-redis treats as a broken connection: it dials
// again and resubscribes. (A plain read timeout it would keep the connection
// for.)
func (l *line) receive(ctx context.Context, h *health) (any, error) {
	if h.pinged.IsZero() {
		msg, err := l.ps.ReceiveTimeout(ctx, l.s.pingAfter)
		if !isTimeout(err) {
			return msg, err
		}
		h.pinged = time.Now()
		if err := l.ps.Ping(ctx); err != nil {
			return nil, err
		}
	}
	dctx, cancel := context.WithDeadline(ctx, h.pinged.Add(l.s.pongWait))
	defer cancel()
	return l.ps.Receive(dctx)
}

// handle acts on one message from the node. Anything at all shows the
// connection lives.
func (l *line) handle(h *health, msg any) {
	h.pinged = time.Time{}
	s := l.s
	if l.shard {
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel != s.channel && s.onShard != nil {
				s.onShard(m.Channel, []byte(m.Payload))
			}
		case *redis.Subscription:
			if m.Kind == "ssubscribe" && m.Channel == s.channel {
				l.subscribed(h)
			}
			switch m.Kind {
			case "ssubscribe":
				s.confirmed(shardKey(m.Channel))
			case "sunsubscribe":
				s.confirmed("u" + shardKey(m.Channel))
			}
		}
		return
	}
	switch m := msg.(type) {
	case *redis.Message:
		if m.Channel != s.channel {
			s.message(m)
			return
		}
		if m.Pattern != "" {
			return // lockproxy's own channel is not the clients' (it names tokens)
		}
		if taken, ok := strings.CutPrefix(m.Payload, takenTag); ok {
			if key, token, ok := parseRelease(taken); ok && s.onTaken != nil {
				s.onTaken(key, token)
			}
		} else if key, token, ok := parseRelease(m.Payload); ok {
			s.onRelease(key, token)
		}
	case *redis.Subscription:
		if m.Kind == "subscribe" && m.Channel == s.channel {
			l.subscribed(h)
		}
		switch m.Kind {
		case "subscribe", "psubscribe":
			s.confirmed(joinKey(m.Channel, m.Kind == "psubscribe"))
		case "unsubscribe", "punsubscribe":
			s.confirmed("u" + joinKey(m.Channel, m.Kind == "punsubscribe"))
		}
	}
}

// subscribed records that the node confirmed the subscription.
func (l *line) subscribed(h *health) {
	switch {
	case h.fails > 0:
		l.s.log.Info(l.what+": subscribed again",
			zap.Duration("outage", time.Since(h.lostAt)), zap.Int("failed_attempts", h.fails))
	case !h.lostAt.IsZero():
		l.s.log.Debug(l.what + ": subscribed")
	}
	*h = health{backoff: minBackoff}
	l.setUp(true)
	if l.onUp != nil {
		l.onUp(true)
	}
}

// failed records a failed receive: the first of an outage at info level,
// the next ones at debug.
func (l *line) failed(h *health, err error) {
	l.setUp(false)
	if l.onUp != nil {
		l.onUp(false)
	}
	h.pinged = time.Time{}
	if h.lostAt.IsZero() {
		h.lostAt = time.Now()
	}
	h.fails++
	if h.fails == 1 {
		l.s.log.Info(l.what+": connection failed; reconnecting", zap.Error(err))
		return
	}
	l.s.log.Debug(l.what+": reconnect failed", zap.Error(err), zap.Int("attempt", h.fails))
}

// setUp marks the current connection subscribed or not, for Ready.
func (l *line) setUp(up bool) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	select {
	case <-l.up:
		if !up {
			l.up = make(chan struct{})
		}
	default:
		if up {
			close(l.up)
		}
	}
}

// isTimeout tells a read deadline passing from a failure.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sleep waits for d, or returns false at once when ctx ends.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// parseRelease reads a release notification, '<length of token>:<token><key>'.
func parseRelease(msg string) (key, token string, ok bool) {
	n, rest, found := strings.Cut(msg, ":")
	size, err := strconv.Atoi(n)
	if !found || err != nil || size < 0 || size > len(rest) {
		return "", "", false
	}
	return rest[size:], rest[:size], true
}
