package upstream

import (
	"net"
	"testing"
	"time"
)

func TestEmbedded(t *testing.T) {
	e, err := StartEmbedded(3)
	if err != nil {
		t.Fatal(err)
	}
	addrs := e.Addrs()
	seen := map[string]bool{}
	for _, a := range addrs {
		seen[a] = true
		n := newNode(t, RedisOptions{Addr: a})
		mustAcquire(t, n, "k", hold("a", time.Minute)) // each node is independent
	}
	if len(seen) != 3 {
		t.Errorf("addresses %v are not 3 distinct ones", addrs)
	}
	e.Close()
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Close", a)
		}
	}
}

func TestEmbeddedNeedsANode(t *testing.T) {
	if _, err := StartEmbedded(0); err == nil {
		t.Fatal("StartEmbedded(0) succeeded")
	}
}

// TestEmbeddedTTLRunsInRealTime: a TTL shrinks with the wall clock, without
// anyone calling FastForward.
func TestEmbeddedTTLRunsInRealTime(t *testing.T) {
	n := newNode(t, RedisOptions{Addr: startEmbedded(t, 1).Addrs()[0]})
	mustAcquire(t, n, "k", hold("a", time.Minute))
	eventually(t, 5*time.Second, "TTL shrinks", func() bool {
		return mustInspect(t, n, "k").TTL < time.Minute-20*time.Millisecond
	})
}
