package quorum

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// TestRefusedAttemptUndoneAfterPause walks every set of paused nodes that
// makes an acquire fail, for 3 and 5 nodes: the acquire's calls time out
// but land once the nodes resume, before or after the rollback (the order
// of calls on dropped connections is unknown). Once they resume, the key
// is free on every node and another token gets it.
func TestRefusedAttemptUndoneAfterPause(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{3, 5} {
		for mask := uint(0); mask < 1<<n; mask++ {
			if n-bits.OnesCount(mask) > n/2 {
				continue // a majority answers: granted, not refused
			}
			for _, reverse := range []bool{false, true} {
				t.Run(fmt.Sprintf("n%d/mask%05b/reverse=%v", n, mask, reverse), func(t *testing.T) {
					nodes := newFakeNodes(n)
					r := New(asNodes(nodes), Config{NodeTimeout: 20 * time.Millisecond})
					defer r.Close()
					for i, f := range nodes {
						if mask&(1<<i) != 0 {
							f.pause()
						}
					}
					h := hold("a")
					h.TTL = time.Hour // no expiry to hide a left-over hold
					if _, err := r.Acquire(ctx, "k", h); !errors.Is(err, engine.ErrNoQuorum) {
						t.Fatalf("acquire with a majority paused: %v", err)
					}
					for _, f := range nodes {
						f.resume(reverse)
					}
					waitCount(t, nodes, "k", "a", 0)
					if _, err := r.Acquire(ctx, "k", hold("b")); err != nil {
						t.Fatalf("another token after the nodes resumed: %v", err)
					}
				})
			}
		}
	}
}

// TestUndecidedOutcomesEverySubset walks, for 3 and 5 nodes, every way a
// lock can be held (on a set of nodes) and every set of silent nodes:
// extend and release report "not held" only when so many nodes said so
// that no majority can hold the lock, success only on a majority of
// holders, and an unknown outcome (or NOQUORUM when fewer than a majority
// answered) otherwise. A release reaches the silent nodes once they answer.
func TestUndecidedOutcomesEverySubset(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{3, 5} {
		q := n/2 + 1
		for held := uint(0); held < 1<<n; held++ {
			for silent := uint(0); silent < 1<<n; silent++ {
				yes := bits.OnesCount(held &^ silent)
				no := bits.OnesCount(^held & ^silent & (1<<n - 1))
				want := func(ok, notHeld error) error {
					switch {
					case yes >= q:
						return ok
					case no > n-q:
						return notHeld
					case yes+no < q:
						return engine.ErrNoQuorum
					default:
						return engine.ErrOutcomeUnknown
					}
				}
				name := fmt.Sprintf("n%d/held%05b/silent%05b", n, held, silent)
				nodes := newFakeNodes(n)
				r := New(asNodes(nodes), Config{NodeTimeout: 10 * time.Millisecond})
				for i, f := range nodes {
					if held&(1<<i) != 0 {
						f.entries["k"] = &fakeEntry{Entry{Token: "tok", Fence: 1, Mode: engine.Lease}, time.Hour, time.Now().Add(time.Hour), "x", true}
					}
					if silent&(1<<i) != 0 {
						f.pause()
					}
				}
				_, err := r.Extend(ctx, "k", "tok", time.Hour, engine.Lease)
				if w := want(nil, engine.ErrNotHeld); w == nil && err != nil || w != nil && !errors.Is(err, w) {
					t.Fatalf("%s: extend: %v, want %v", name, err, w)
				}
				ok, err := r.Release(ctx, "k", "tok", nil, nil)
				w := want(nil, nil)
				if w == nil && (err != nil || ok != (yes >= q)) || w != nil && !errors.Is(err, w) {
					t.Fatalf("%s: release: %v %v, want %v", name, ok, err, w)
				}
				for _, f := range nodes {
					f.resume(false)
				}
				waitCount(t, nodes, "k", "tok", 0) // carried to the silent nodes
				r.Close()
			}
		}
	}
}

// TestSuspectedNodeNotWaitedFor: a node that failed twice in a row is not
// waited for once a majority of the others answered — here a release that
// they leave undecided returns at once, though the node would answer only
// in an hour — and is trusted again once it answers.
func TestSuspectedNodeNotWaitedFor(t *testing.T) {
	ctx := context.Background()
	nodes := newFakeNodes(3)
	r := New(asNodes(nodes), Config{NodeTimeout: time.Hour})
	defer r.Close()
	nodes[2].setDown(true)
	for i := range suspectAfter {
		if _, _, err := r.Inspect(ctx, fmt.Sprint("warm", i)); err != nil {
			t.Fatal(err)
		}
	}
	nodes[2].setDown(false)
	nodes[2].pause()
	// Held on nodes 0 and 2, as when a release through one instance races
	// an acquire through another: node 0 says yes, 1 says no, 2 is silent.
	for _, i := range []int{0, 2} {
		nodes[i].entries["k"] = &fakeEntry{Entry{Token: "tok", Mode: engine.Lease}, time.Hour, time.Now().Add(time.Hour), "x", true}
	}
	done := make(chan error, 1)
	go func() { _, err := r.Release(ctx, "k", "tok", nil, nil); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, engine.ErrOutcomeUnknown) || !errors.Is(err, ErrSuspected) {
			t.Fatalf("release with a suspected node silent: %v, want an unknown outcome", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the release waited for the suspected node")
	}
	nodes[2].resume(false)
	deadline := time.Now().Add(10 * time.Second)
	for r.health.suspected() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the node is still suspected after it answered")
		}
		if _, _, err := r.Inspect(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAtMostAMinoritySuspected: with every node failing, only n-quorum of
// them are suspected, so a majority is always waited for.
func TestAtMostAMinoritySuspected(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		h := newHealth(n, n/2+1)
		for range 5 {
			for i := range n {
				h.note(i, errDown)
			}
		}
		if got := bits.OnesCount64(h.suspected()); got != n-(n/2+1) {
			t.Fatalf("%d nodes all failing: %d suspected, want %d", n, got, n-(n/2+1))
		}
	}
}
