package engine

import (
	"context"
	"testing"
)

// TestBoundRegrantMovesOwner (issue 24): a connection-bound lock granted
// again with its token on another connection belongs to that connection:
// the first one's close releases nothing, the second's releases it.
func TestBoundRegrantMovesOwner(t *testing.T) {
	m := newMem()
	e := newEngine(m)
	first, second := e.NewOwner(1), e.NewOwner(2)
	ctx := context.Background()
	for _, o := range []*Owner{first, second} {
		if _, err := e.Lock(ctx, o, "k", Hold{Token: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, held := m.snapshot(); held != 1 || e.BoundHeld() != 1 {
		t.Fatalf("after the first connection's close: %d held upstream, %d kept; want the lock kept", held, e.BoundHeld())
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, held := m.snapshot(); held != 0 || e.BoundHeld() != 0 {
		t.Fatalf("after the second connection's close: %d held upstream, %d kept; want it released", held, e.BoundHeld())
	}
}
