package upstream

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on what the restart rule knows of a durable node's counter
// (quorum/restart.go's lost), on redis-servers.

// TestDurableRaisedByACommitWipedHeldOut: three new redis-servers with
// appendfsync always, node 2's counter far above the others' (a floor
// raised to the time while a node was down). c's grant takes node 2's
// counter as its fence, and its commit raises nodes 0 and 1 to it; their
// acquire replies carried only their own small counters. Nodes 0 and 1
// restart with their appendonly files gone, a few grants through other
// instances bring their counters back above what this instance knew, and
// node 2 goes down: the instance counted them at once as durable (lost did
// not fire) and granted x a fence far below c's. A counted commit reply
// tells the instance the node's counter is at least the fence: it holds
// them out, and grants x a fence above c's once their floors are raised.
func TestDurableRaisedByACommitWipedHeldOut(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{AppendFsyncAlways: true})
	ctx := t.Context()
	n2 := newNode(t, RedisOptions{Addr: servers[2].Addr()})
	st := n2.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
	if st.Err != nil {
		t.Fatal(st.Err)
	}
	if r := n2.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 1000000, Token: st.Status.RunID}); r.Err != nil || !r.OK {
		t.Fatalf("raising node 2: %+v", r)
	}
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	const lease = 2 * time.Second
	// Reads only when a reply asks for one: the grants below come after
	// its last read, as a second of grants does at the default.
	r := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: time.Hour})
	defer r.Close()
	waitCounted(t, r, 30*time.Second, true, true, true)
	var top int64
	eventually(t, 30*time.Second, "a grant with node 2's counter as its fence", func() bool {
		g, err := r.Acquire(ctx, "k", hold("c", lease)) // may decide before node 2's reply
		if err != nil {
			t.Fatal(err)
		}
		top = g.Fence
		if ok, err := r.Release(ctx, "k", "c", nil, nil); !ok || err != nil {
			t.Fatalf("release c: %v %v", ok, err)
		}
		return top > 1000000
	})
	for _, s := range servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(s.Dir(), "appendonlydir")); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		// Grants through other instances before this one reads it.
		if err := rawClient(t, s.Addr()).Set(ctx, DefaultPrefix+"layout", 50, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	// Until the read that the replies ask for: then x is granted, or
	// node 0 or 1 is held out (whichever commit replies came before the
	// commit's majority: the node whose reply came late counts at once,
	// but with node 2 down no majority grants without the other).
	var g engine.Grant
	granted := false
	eventually(t, 30*time.Second, "the wiped restarts read", func() bool {
		var err error
		g, err = r.Acquire(ctx, "k", hold("x", lease)) // its replies ask for a read
		granted = err == nil
		held := 0
		for _, h := range r.HeldOut() {
			if h.Node < 2 {
				held++
			}
		}
		return granted || held > 0
	})
	if !granted {
		var err error
		g, err = r.Acquire(ctx, "k", hold("x", lease))
		granted = err == nil
	}
	if granted && g.Fence <= top {
		t.Fatalf("x's grant after nodes 0 and 1, raised by c's commit, restarted durable with nothing: fence %d going back, after %d", g.Fence, top)
	}
}
