package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/pubsub"
	"github.com/lockproxy/lockproxy/upstream"
)

// nodePubSub carries the clients' pub/sub through the redlock (or
// embedded) nodes, so that every instance sharing them hears it
// (pubsub.Remote). It uses each node's one pub/sub connection, the one
// that carries release notifications.
//
//   - SUBSCRIBE is confirmed once every connected node confirmed it, and
//     succeeds if a majority did: a message published on a majority (a
//     script run by quorum, or PUBLISH here) then reaches this instance
//     through at least one node. Fewer within the timeout is an error, and
//     the nodes that did subscribe are unsubscribed; a node down now
//     subscribes when it comes back. UNSUBSCRIBE waits likewise (each).
//   - SSUBSCRIBE and SUNSUBSCRIBE likewise, on each node's second pub/sub
//     connection, the one for shard channels (dialled on the first
//     SSUBSCRIBE); the embedded backend's nodes (miniredis) have no shard
//     channels, and there the hub keeps them in this process.
//   - PUBLISH (and SPUBLISH, counting SSUBSCRIBE receivers) goes to every node at once. Its reply is the largest count
//     of receivers any node gave: the instances (and direct clients of the
//     node) listening there, each counted once per matching channel or
//     pattern, not this instance's clients. Zero means no instance
//     listened. It answers once a majority took it, without waiting for
//     a slow node. Fewer than a majority taking it is an error.
type nodePubSub struct {
	subs     []*upstream.Subscription
	timeout  time.Duration // bound of one node's answer
	reserved string        // the release channel (upstream.ReleasedChannel)
}

var _ pubsub.Remote = (*nodePubSub)(nil)

// errNoQuorum starts the error of a pub/sub call fewer than a majority took.
var errNoQuorum = errors.New("NOQUORUM")

func (r *nodePubSub) majority() int { return len(r.subs)/2 + 1 }

// errReserved refuses lockproxy's own channel: its messages name lock
// tokens, and a forged one would tell an instance a lock was taken.
func (r *nodePubSub) errReserved(channel string) error {
	if channel == r.reserved {
		return errors.New("ERR channel '" + channel + "' is reserved for lockproxy's release notifications")
	}
	return nil
}

func (r *nodePubSub) Subscribe(ctx context.Context, name string, kind pubsub.Kind) error {
	if err := r.errReserved(name); err != nil && kind != pubsub.Pattern {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	ok := r.each(ctx, func(s *upstream.Subscription) (<-chan struct{}, error) {
		if kind == pubsub.Shard {
			return s.JoinShard(ctx, name)
		}
		return s.Join(ctx, name, kind == pubsub.Pattern) // a node down subscribes when back
	})
	if ok >= r.majority() {
		return nil
	}
	return fmt.Errorf("%w subscribed on %d of %d nodes, fewer than a majority", errNoQuorum, ok, len(r.subs))
}

func (r *nodePubSub) Unsubscribe(name string, kind pubsub.Kind) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	r.each(ctx, func(s *upstream.Subscription) (<-chan struct{}, error) {
		if kind == pubsub.Shard {
			return s.LeaveShard(ctx, name)
		}
		return s.Leave(ctx, name, kind == pubsub.Pattern) // a broken connection forgets it anyway
	})
}

// each runs call on every node at once and waits, until ctx ends, for the
// confirmation of each node that is connected; it returns how many
// confirmed; a node whose release notifications are not subscribed now
// counts as down (its shard connection too). Waiting for all of them, not just a majority, keeps the
// nodes' subscriptions alike, so that a message and a pmessage of one
// PUBLISH arrive in Redis's order and a PUBLISH after UNSUBSCRIBE counts
// no one; a node that stopped answering costs up to r.timeout until its
// Subscription notices.
func (r *nodePubSub) each(ctx context.Context, call func(*upstream.Subscription) (<-chan struct{}, error)) int {
	oks := make(chan bool, len(r.subs))
	for _, s := range r.subs {
		go func() {
			connected := s.Connected()
			done, _ := call(s)
			if !connected {
				oks <- false
				return
			}
			select {
			case <-done:
				oks <- true
			case <-ctx.Done():
				oks <- false
			}
		}()
	}
	ok := 0
	for range r.subs {
		if <-oks {
			ok++
		}
	}
	return ok
}

func (r *nodePubSub) Publish(ctx context.Context, kind pubsub.Kind, channel string, payload []byte) (int64, error) {
	if err := r.errReserved(channel); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	type answer struct {
		n   int64
		err error
	}
	answers := make(chan answer, len(r.subs))
	for _, s := range r.subs {
		go func() {
			var a answer
			if kind == pubsub.Shard {
				a.n, a.err = s.SPublish(ctx, channel, payload)
			} else {
				a.n, a.err = s.Publish(ctx, channel, payload)
			}
			answers <- a
		}()
	}
	var most int64
	ok, answered := 0, 0
	var errs []string
	for ok < r.majority() && answered < len(r.subs) {
		a := <-answers
		answered++
		if a.err != nil {
			errs = append(errs, a.err.Error())
			continue
		}
		ok++
		most = max(most, a.n)
	}
	if ok < r.majority() {
		return 0, fmt.Errorf("%w published on %d of %d nodes, fewer than a majority: %s",
			errNoQuorum, ok, len(r.subs), strings.Join(errs, "; "))
	}
	return most, nil
}
