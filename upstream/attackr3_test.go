package upstream

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on the vetted floor's record (floor.lua, the status read).

// TestStatusReadsTheRecordOfAnEarlierProcess: the status read gives, beside
// the floor recorded for the process that answers (Status.Floor), the
// counter of the record whichever process it names (Status.Recorded): a
// node verified durable that restarted kept the holds of the process
// before it, those from before its floor too, and is counted at once with
// that record's bound (quorum's TestStaleHoldKeptByADurableRestart). A
// record that cannot be read gives neither. When the read gave the
// record only for the process it names, an instance that first met the
// durable process took none of those holds as stale.
func TestStatusReadsTheRecordOfAnEarlierProcess(t *testing.T) {
	addr := redistest.Start(t, redistest.Options{}).Addr()
	n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
	status := func() quorum.Status {
		t.Helper()
		r := n.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.Status
	}
	if s := status(); s.Floor != 0 || s.Recorded != 0 {
		t.Fatalf("status before any floor: %+v, want none", s)
	}
	mustAcquire(t, n, "k", hold("a", time.Minute))
	// The process before this one, as a durable restart leaves it.
	earlier := strings.Repeat("e", 40)
	if r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 40, Token: earlier}); r.Err != nil || !r.OK || r.Claim.Counter != 40 {
		t.Fatalf("OpFloor: %+v", r)
	}
	if s := status(); s.Floor != 0 || s.Recorded != 40 {
		t.Fatalf("status with an earlier process's record: %+v, want floor 0, recorded 40", s)
	}
	run := status().RunID
	if r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 50, Token: run}); r.Err != nil || !r.OK || r.Claim.Counter != 50 {
		t.Fatalf("OpFloor: %+v", r)
	}
	if s := status(); s.Floor != 50 || s.Recorded != 50 {
		t.Fatalf("status with this process's record: %+v, want floor and recorded 50", s)
	}
	for _, v := range []string{"ninety:" + run, "90:", "-3:" + run} {
		raw.Set(ctx, DefaultPrefix+"vetted-floor", v, 0)
		if s := status(); s.Floor != 0 || s.Recorded != 0 {
			t.Fatalf("status with record %q: %+v, want none", v, s)
		}
	}
	raw.Del(ctx, DefaultPrefix+"vetted-floor")
	raw.HSet(ctx, DefaultPrefix+"vetted-floor", "90", run)
	if s := status(); s.Floor != 0 || s.Recorded != 0 {
		t.Fatalf("status with a record of another type: %+v, want none", s)
	}
}

// TestStaleHoldKeptByADurableRestart: nodes 0 and 1 restart empty after
// fences up to top were granted; while instance A holds them out, token
// b's refused attempt leaves its hold on both (fence 1, their counters
// after the restart), and A raises their floors. Then both restart from a
// snapshot taken just before (SAVE: b's holds, their counters, the
// record of their floors, which names the process before) and their
// operator turns appendonly and appendfsync always on. Instance C, started
// now, counts them at once, verified durable: before it took the record
// of the process before them, b's retry through it found its holds a
// majority with fence 1 and answered it, after top.
func TestStaleHoldKeptByADurableRestart(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	const lease = 4 * time.Second // the hold-out: room to leave the holds before the floor
	a := restartRedlock(t, servers, lease)
	waitCounted(t, a, 30*time.Second, true, true, true)
	ctx := t.Context()
	top := grantedThrice(t, a, lease)
	restartTwoEmpty(t, servers, a)
	for _, s := range servers[:2] {
		n := newNode(t, RedisOptions{Addr: s.Addr()})
		c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
		if err != nil || c.State != quorum.Acquired || c.Fence > top {
			t.Fatalf("b's hold left on %s while it is held out: %+v %v (fences granted up to %d)", s.Addr(), c, err, top)
		}
	}
	waitCounted(t, a, 30*time.Second, true, true, true)
	a.Close() // no instance sees the restarts below
	for _, s := range servers[:2] {
		raw := rawClient(t, s.Addr())
		if v := raw.Get(ctx, DefaultPrefix+"vetted-floor").Val(); !strings.Contains(v, ":") {
			t.Fatalf("no vetted floor on %s: %q", s.Addr(), v)
		}
		if err := raw.Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		raw = rawClient(t, s.Addr())
		if err := raw.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
			t.Fatal(err)
		}
	}
	heldOn(t, "k", "b", servers[0].Addr(), servers[1].Addr())
	c := restartRedlock(t, servers, lease)
	waitCounted(t, c, 30*time.Second, true, true, true)
	g, err := c.Acquire(ctx, "k", hold("b", lease))
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= top {
		t.Fatalf("b's retry after nodes 0 and 1 restarted durable: fence %d going back, after %d", g.Fence, top)
	}
}

// TestDurableWhileHeldOutNotCountedAtOnce: nodes 0 and 1 restart empty
// after fences up to top were granted; instance A holds them out (for an
// hour: it raises nothing here). Their operator turns appendonly and
// appendfsync always on (CONFIG SET), and node 2 goes down. Instance B,
// started now, found nodes 0 and 1 verified durable and counted them at
// once, with the counters they have since the restart: x was granted
// fence 1 after top. Their record says
// an instance saw them restart without fsync (RestartedMark): B holds them
// out too, and grants x a fence above top once it raised their floors.
func TestDurableWhileHeldOutNotCountedAtOnce(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	a := quorum.New(nodes, quorum.Config{MaxLease: time.Hour, StatusEvery: 100 * time.Millisecond})
	defer a.Close()
	const lease = 2 * time.Second
	b := restartRedlock(t, servers, lease)
	waitCounted(t, b, 30*time.Second, true, true, true)
	ctx := t.Context()
	// A counts the fresh nodes once B raised them (vetted for them).
	waitCounted(t, a, 30*time.Second, true, true, true)
	b.Close()
	top := grantedThrice(t, a, lease)
	restartTwoEmpty(t, servers, a)
	for _, s := range servers[:2] {
		raw := rawClient(t, s.Addr())
		eventually(t, 10*time.Second, "the restart recorded on "+s.Addr(), func() bool {
			return raw.Get(ctx, DefaultPrefix+"vetted").Val() == quorum.RestartedMark
		})
		if err := raw.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Node 2, which records top too, is down: x's fence is nodes 0 and 1's.
	grantAboveThroughB(t, servers, lease, top, "nodes 0 and 1 were made durable while held out")
}

// TestDurableRestartThatLostItsDataHeldOut: three redis-servers with
// appendfsync always grant fences up to top; nodes 0 and 1 restart with
// their appendonly files gone (a new volume), still appendfsync always,
// and node 2 goes down. The instance that read their counters before
// counted them at once as durable: x was granted fence 1 after top. Their
// counters went back: it holds them out, and grants x a fence above top
// once their floors are raised.
func TestDurableRestartThatLostItsDataHeldOut(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{AppendFsyncAlways: true})
	ctx := t.Context()
	// Counters far above what the acquires sent to a wiped node before
	// the status read they ask for can bring its counter back to.
	for _, s := range servers {
		n := newNode(t, RedisOptions{Addr: s.Addr()})
		st := n.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
		if st.Err != nil {
			t.Fatal(st.Err)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 1000000, Token: st.Status.RunID}); r.Err != nil || !r.OK {
			t.Fatalf("raising %s: %+v", s.Addr(), r)
		}
	}
	const lease = 2 * time.Second
	a := restartRedlock(t, servers, lease)
	waitCounted(t, a, 30*time.Second, true, true, true)
	top := grantedThrice(t, a, lease)
	// An instance whose first read (New) saw the counters up to top.
	r := restartRedlock(t, servers, lease)
	waitCounted(t, r, 30*time.Second, true, true, true)
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
		if v := rawClient(t, s.Addr()).Exists(ctx, DefaultPrefix+"layout").Val(); v != 0 {
			t.Fatalf("%s kept its counter: the stage does not test", s.Addr())
		}
	}
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	var g engine.Grant
	eventually(t, 30*time.Second, "x's grant", func() bool {
		var err error
		g, err = r.Acquire(ctx, "k", hold("x", lease))
		return err == nil
	})
	if g.Fence <= top {
		t.Fatalf("x's grant after nodes 0 and 1 restarted durable with nothing: fence %d going back, after %d", g.Fence, top)
	}
}

// grantedThrice grants and releases k to c0, c1 and c2 through a, and
// returns the highest fence granted.
func grantedThrice(t *testing.T, a *quorum.Redlock, lease time.Duration) int64 {
	t.Helper()
	var top int64
	for i := range 3 {
		tok := fmt.Sprintf("c%d", i)
		g, err := a.Acquire(t.Context(), "k", hold(tok, lease))
		if err != nil {
			t.Fatal(err)
		}
		top = max(top, g.Fence)
		if ok, err := a.Release(t.Context(), "k", tok, nil, nil); !ok || err != nil {
			t.Fatalf("release %s: %v %v", tok, ok, err)
		}
	}
	return top
}

// restartTwoEmpty kills and restarts servers 0 and 1 with their data gone
// (no persistence) and waits until a holds them out.
func restartTwoEmpty(t *testing.T, servers []*redistest.Server, a *quorum.Redlock) {
	t.Helper()
	for _, s := range servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	waitCounted(t, a, 30*time.Second, false, false, true)
}

// grantAboveThroughB stops server 2 and grants x through a new instance B
// over servers 0 and 1 alone; its fence must be above top.
func grantAboveThroughB(t *testing.T, servers []*redistest.Server, lease time.Duration, top int64, after string) {
	t.Helper()
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	b := restartRedlock(t, servers, lease)
	var g engine.Grant
	eventually(t, 30*time.Second, "x's grant through B", func() bool {
		var err error
		g, err = b.Acquire(t.Context(), "k", hold("x", lease))
		return err == nil
	})
	if g.Fence <= top {
		t.Fatalf("x's grant through B after %s: fence %d going back, after %d", after, g.Fence, top)
	}
}
