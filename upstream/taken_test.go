package upstream

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestPublishTaken: a lock taken by DEL through one instance is announced
// on the node's release channel; a SubscribeTaken subscription hands it,
// key and token, to onTaken and never to onRelease, and a plain Subscribe
// (an instance that does not know the message) reads no release in it.
func TestPublishTaken(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	o := RedisOptions{Addr: s.Addr()}
	released, taken, plain := make(chan string, 10), make(chan string, 10), make(chan string, 10)
	sub := SubscribeTaken(o, func(k, _ string) { released <- k }, func(k, tok string) { taken <- k + " " + tok }, nil)
	t.Cleanup(func() { sub.Close() })
	mustReady(t, sub)
	mustReady(t, newSubscription(t, o, plain, nil, DefaultPingAfter))

	if err := sub.PublishTaken(testCtx(t), "orders:42", "tok:en"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, taken); got != "orders:42 tok:en" {
		t.Fatalf("onTaken got %q", got)
	}
	if err := rawClient(t, s.Addr()).Publish(testCtx(t), defaultChannel, "0:end").Err(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan string{"onRelease": released, "a plain subscription": plain} {
		if got := next(t, ch); got != "end" {
			t.Fatalf("%s got %q before the end marker: it read a release in the announcement", name, got)
		}
	}
}
