package upstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestJoinLeave: a joined channel and pattern are confirmed, their
// messages reach the Message handler (a release still reaches Released),
// and after Leave the node counts no subscriber.
func TestJoinLeave(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx, raw := testCtx(t), rawClient(t, addr)
		msgs := make(chan string, 10)
		s := SubscribeHandlers(RedisOptions{Addr: addr}, Handlers{
			Released: func(key, token string) { msgs <- "released " + key },
			Message: func(pattern, channel string, payload []byte) {
				msgs <- strings.TrimSpace(pattern + " " + channel + " " + string(payload))
			},
		}, nil)
		t.Cleanup(func() { s.Close() })
		if err := s.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		for _, j := range []struct {
			name    string
			pattern bool
		}{{"ch", false}, {"p*", true}, {"lockproxy:*", true}} {
			done, err := s.Join(ctx, j.name, j.pattern)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatalf("%s not confirmed", j.name)
			}
		}
		// The release channel's message reaches Released only, not
		// Message through the pattern lockproxy:* (it names a token).
		for _, p := range [][2]string{{"ch", "m"}, {"px", "n"}, {defaultChannel, "1:tk"}, {"ch", "end"}} {
			if err := raw.Publish(ctx, p[0], p[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// miniredis may deliver a pattern's message before an earlier
		// channel's: the first four are compared as a set. On Redis, a
		// leaked release would take the place of "ch end".
		want := map[string]bool{"ch m": true, "p* px n": true, "released k": true, "ch end": true}
		for range 4 {
			select {
			case got := <-msgs:
				if !want[got] {
					t.Fatalf("got %q, want one of %v", got, want)
				}
				delete(want, got)
			case <-ctx.Done():
				t.Fatalf("missing %v", want)
			}
		}
		for _, l := range []struct {
			name    string
			pattern bool
		}{{"ch", false}, {"p*", true}, {"lockproxy:*", true}, {defaultChannel, false}} {
			done, err := s.Leave(ctx, l.name, l.pattern)
			if err != nil {
				t.Fatal(err)
			}
			<-done
		}
		if n, err := raw.Publish(ctx, "ch", "gone").Result(); err != nil || n != 0 {
			t.Fatalf("PUBLISH after Leave: %d receivers, %v", n, err)
		}
		// The release channel stays: Leave of it changes nothing.
		if n, err := raw.Publish(ctx, defaultChannel, "1:tk2").Result(); err != nil || n != 1 {
			t.Fatalf("release channel after Leave: %d receivers, %v", n, err)
		}
	})
}

// TestBPopCancelLeavesNoBlockedClient: a blocked pop ended by its context
// leaves no blocked client on the node, and its connection serves the
// next call; an element pushed meanwhile is popped.
func TestBPopCancelLeavesNoBlockedClient(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		ctx, raw := testCtx(t), rawClient(t, addr)
		n := NewListNode(RedisOptions{Addr: addr}, 2)
		t.Cleanup(func() { n.Close() })
		for range 3 {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			p, late, err := n.BPop(cctx, true, []string{"sig"}, 0)
			cancel()
			if p.OK || late || err == nil {
				t.Fatalf("cancelled pop: %+v %v %v", p, late, err)
			}
		}
		// miniredis has no blocked_clients; redis-server must show none.
		if info, err := raw.Info(ctx, "clients").Result(); err == nil && strings.Contains(info, "blocked_clients:") {
			eventually(t, 10*time.Second, "no blocked client", func() bool {
				info, _ := raw.Info(ctx, "clients").Result()
				return strings.Contains(info, "blocked_clients:0")
			})
		}
		if err := raw.RPush(ctx, "sig", "v").Err(); err != nil {
			t.Fatal(err)
		}
		p, late, err := n.BPop(ctx, true, []string{"sig"}, 0)
		if err != nil || late || !p.OK || p.Key != "sig" || p.Value != "v" {
			t.Fatalf("pop: %+v %v %v", p, late, err)
		}
	})
}

// TestJoinShard: a joined shard channel is confirmed on the second
// connection; its SPUBLISH messages reach ShardMessage and its PUBLISH
// ones nothing (nor does SPUBLISH reach a channel joined with Join);
// ShardUp reports the connection; after LeaveShard the node counts no
// shard subscriber, and Close ends both connections.
func TestJoinShard(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, raw := testCtx(t), rawClient(t, srv.Addr())
	msgs := make(chan string, 10)
	ups := make(chan bool, 10)
	s := SubscribeHandlers(RedisOptions{Addr: srv.Addr()}, Handlers{
		Released: func(key, token string) { msgs <- "released " + key },
		Message: func(pattern, channel string, payload []byte) {
			msgs <- strings.TrimSpace("message " + pattern + " " + channel + " " + string(payload))
		},
		ShardMessage: func(channel string, payload []byte) { msgs <- "smessage " + channel + " " + string(payload) },
		ShardUp:      func(up bool) { ups <- up },
	}, nil)
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := raw.PubSubShardNumSub(ctx, defaultChannel).Result(); err != nil || n[defaultChannel] != 0 {
		t.Fatalf("before any JoinShard: %v %v, want no shard connection", n, err)
	}
	done, err := s.JoinShard(ctx, "sh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Join(ctx, "plain", false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("shard channel not confirmed")
	}
	select {
	case up := <-ups:
		if !up {
			t.Fatal("ShardUp(false) first")
		}
	case <-ctx.Done():
		t.Fatal("no ShardUp")
	}
	for _, p := range []struct{ cmd, ch, msg string }{
		{"publish", "sh", "not-shard"}, {"spublish", "plain", "not-plain"},
		{"spublish", defaultChannel, "1:tk"}, {"spublish", "sh", "m"},
	} {
		if err := raw.Do(ctx, p.cmd, p.ch, p.msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case got := <-msgs:
		if got != "smessage sh m" {
			t.Fatalf("got %q, want the shard channel's message only", got)
		}
	case <-ctx.Done():
		t.Fatal("no shard message")
	}
	done, err = s.LeaveShard(ctx, "sh")
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if n, err := raw.SPublish(ctx, "sh", "gone").Result(); err != nil || n != 0 {
		t.Fatalf("SPUBLISH after LeaveShard: %d receivers, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The node drops the closed connection soon after; bounded by ctx.
	for {
		n, err := raw.PubSubShardNumSub(ctx, defaultChannel).Result()
		if err == nil && n[defaultChannel] == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("after Close: %v %v, want the shard connection gone", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
