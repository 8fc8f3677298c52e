package pubsub

import (
	"testing"
	"time"
)

// copies feeds d one copy per node in order and counts the deliveries.
func copies(d *Dedup, payload string, nodes ...int) int {
	n := 0
	for _, node := range nodes {
		if d.First(node, "", "ch", []byte(payload)) {
			n++
		}
	}
	return n
}

func TestDedupOnceAcrossNodes(t *testing.T) {
	d := NewDedup(3, time.Minute, 100)
	if n := copies(d, "m", 0, 1, 2); n != 1 {
		t.Fatalf("three copies: %d deliveries, want 1", n)
	}
	if d.Len() != 0 {
		t.Fatalf("entry kept after every node sent its copy: %d", d.Len())
	}
	// The same payload published twice, copies interleaved as three
	// connections may deliver them: two deliveries.
	if n := copies(d, "m", 0, 0, 1, 2, 1, 2); n != 2 {
		t.Fatalf("two publishes: %d deliveries, want 2", n)
	}
	// A pattern message is its own message.
	if !d.First(0, "c*", "ch", []byte("m")) || d.First(1, "c*", "ch", []byte("m")) {
		t.Fatal("pattern copies")
	}
}

func TestDedupNodeDownAndBack(t *testing.T) {
	d := NewDedup(3, time.Minute, 100)
	d.Down(2)
	if n := copies(d, "m", 0, 1); n != 1 || d.Len() != 0 {
		t.Fatalf("with a node down: %d deliveries, %d entries; want 1, 0", n, d.Len())
	}
	// Published on 0 and 1 while node 2 is away; node 2 comes back, then
	// is the only one to send the next publish: it must be delivered.
	if n := copies(d, "x", 0); n != 1 {
		t.Fatal("first copy not delivered")
	}
	d.Up(2)
	if n := copies(d, "x", 1); n != 0 {
		t.Fatal("node 1's copy of the first publish delivered again")
	}
	if n := copies(d, "x", 2); n != 1 {
		t.Fatal("node 2's copy of a later publish was dropped")
	}
}

func TestDedupBounded(t *testing.T) {
	now := time.Unix(0, 0)
	d := NewDedup(3, 10*time.Second, 5)
	d.now = func() time.Time { return now }
	// Node 2 never sends its copies: the entries wait for it, at most max.
	for i := range 20 {
		copies(d, string(rune('a'+i)), 0, 1)
	}
	if d.Len() > 6 {
		t.Fatalf("%d entries held, max 5", d.Len())
	}
	now = now.Add(11 * time.Second)
	copies(d, "late", 0)
	if d.Len() != 1 {
		t.Fatalf("%d entries after keep, want only the new one", d.Len())
	}
	// A copy later than keep is delivered again: the documented duplicate.
	if n := copies(d, "t", 2); n != 1 {
		t.Fatal("late copy")
	}
}
