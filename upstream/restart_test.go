package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Tests of Redlock's restart rule (quorum/restart.go) on real redis-servers
// that restart without persistence: they lose every lock and counter.

// restartRedlock is a Redlock over the servers with the restart rule on.
func restartRedlock(t *testing.T, servers []*redistest.Server, maxLease time.Duration) *quorum.Redlock {
	t.Helper()
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	r := quorum.New(nodes, quorum.Config{MaxLease: maxLease, StatusEvery: 100 * time.Millisecond})
	t.Cleanup(func() { r.Close() })
	return r
}

// waitCounted polls until the Redlock counts exactly the nodes of want.
func waitCounted(t *testing.T, r *quorum.Redlock, within time.Duration, want ...bool) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("counted nodes %v", want), func() bool { return slices.Equal(r.Counted(), want) })
}

// TestRestartedNodeNotCountedWhileItsLeaseRuns: a lock held on nodes 0 and
// 1 only (node 2 lost it); node 0 restarts empty. Nodes 0 and 2 are now
// free, but node 0 is not counted, so another token is refused until the
// holder's lease has expired; then it gets the lock with a higher fence.
func TestRestartedNodeNotCountedWhileItsLeaseRuns(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	const lease = 6 * time.Second // far above a restart on a loaded machine
	r := restartRedlock(t, servers, lease)
	// Fresh servers without fsync may have lost leases just before:
	// nothing counts until a lease has run out since their start.
	waitCounted(t, r, 30*time.Second, true, true, true)
	ctx := testCtx(t)

	start := time.Now()
	g, err := r.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldUntil := start.Add(g.Validity)
	heldOn(t, "k", "a", servers[2].Addr())
	raw := rawClient(t, servers[2].Addr())
	if n, err := raw.Del(ctx, "k").Result(); n != 1 || err != nil {
		t.Fatalf("dropping the lock on node 2: %d %v", n, err)
	}
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	// b is refused while a's lease runs, however the tries fall.
	tries, refusals := 0, 0
	var gb engine.Grant
	for deadline := time.Now().Add(30 * time.Second); ; tries++ {
		if time.Now().After(deadline) {
			t.Fatalf("b not granted after %d tries (%d refused): %v", tries, refusals, err)
		}
		gb, err = r.Acquire(ctx, "k", hold("b", lease))
		if err == nil {
			break
		}
		if !errors.Is(err, engine.ErrNotAcquired) && !errors.Is(err, engine.ErrNoQuorum) {
			t.Fatalf("b's acquire: %v", err)
		}
		refusals++
		time.Sleep(50 * time.Millisecond)
	}
	if granted := time.Now(); granted.Before(heldUntil) {
		t.Fatalf("b granted %v before a's lease ended (after %d refusals): two holders", heldUntil.Sub(granted), refusals)
	}
	if refusals == 0 {
		t.Fatalf("b granted at its first try: the restart took longer than the lease, nothing was checked")
	}
	if gb.Fence <= g.Fence {
		t.Fatalf("b's fence %d after a's %d", gb.Fence, g.Fence)
	}
	waitCounted(t, r, 30*time.Second, true, true, true)
}

// TestDurableNodeCountedAtOnce: a node verified to run with appendonly yes
// and appendfsync always loses nothing when it restarts, so it counts again
// at once, not a lease later: with another node down, grants go on.
func TestDurableNodeCountedAtOnce(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{AppendFsyncAlways: true})
	r := restartRedlock(t, servers, time.Hour) // a wait would outlast the test
	waitCounted(t, r, 20*time.Second, true, true, true)
	ctx := testCtx(t)
	g, err := r.Acquire(ctx, "k", hold("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr())
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	if err := servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	// Nodes 0 and 2 make the quorum: node 0 kept a's lock and its counter.
	eventually(t, 20*time.Second, "node 0 counted again", func() bool {
		_, err := r.Acquire(ctx, "k", hold("b", time.Minute))
		return errors.Is(err, engine.ErrNotAcquired) && !errors.Is(err, engine.ErrNoQuorum)
	})
	if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("a's release on nodes 0 and 2: %v %v", ok, err)
	}
	gb, err := r.Acquire(ctx, "k", hold("b", time.Minute))
	if err != nil || gb.Fence <= g.Fence {
		t.Fatalf("b after a: %+v %v (a's fence %d)", gb, err, g.Fence)
	}
	if c := r.Counted(); !c[0] {
		t.Fatalf("counted %v", c)
	}
}

// TestLeaseLongerThanMaxLeaseRefused: the restart rule's wait bounds every
// lease, so a longer one is refused rather than left uncovered.
func TestLeaseLongerThanMaxLeaseRefused(t *testing.T) {
	servers := redistest.StartN(t, 1, redistest.Options{AppendFsyncAlways: true})
	r := restartRedlock(t, servers, time.Minute)
	waitCounted(t, r, 20*time.Second, true)
	ctx := testCtx(t)
	if _, err := r.Acquire(ctx, "k", hold("a", time.Minute+time.Millisecond)); !errors.Is(err, quorum.ErrLeaseTooLong) {
		t.Fatalf("acquire beyond the max lease: %v", err)
	}
	if _, err := r.Acquire(ctx, "k", hold("a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Extend(ctx, "k", "a", time.Hour, ""); !errors.Is(err, quorum.ErrLeaseTooLong) {
		t.Fatalf("extend beyond the max lease: %v", err)
	}
}

// TestRestartChurn is issue 12's test: nodes restart without persistence
// while clients of two Redlocks (two lockproxy instances) take 3 s leases on
// one key and hold them 2 s, for 30 s. A checker fails on two holders at
// once (judged by when each grant was made and when its holder let go or
// its validity ended) and on a fence that does not increase in grant order.
// Every six seconds, rotating over three nodes, one node is killed; a
// second later it restarts empty, and so does the next one: a lease granted
// meanwhile on the other two is left on one node while two empty ones make
// a majority — a rule that counted them at once would grant the key twice,
// with a lower fence. The third node is then paused (SIGSTOP) for a
// second: a pause is not a restart, and it counts again when resumed. A node is not counted for three to five seconds after
// it restarts, so a restart every second would leave no majority ever
// counted, and no grant to check; the quiet seconds leave room for grants.
func TestRestartChurn(t *testing.T) {
	const (
		nodes    = 3
		lease    = 3 * time.Second
		holdFor  = 2 * time.Second
		clients  = 4
		runFor   = 30 * time.Second
		maxLease = lease
	)
	servers := redistest.StartN(t, nodes, redistest.Options{})
	locks := []*quorum.Redlock{restartRedlock(t, servers, maxLease), restartRedlock(t, servers, maxLease)}
	all := slices.Repeat([]bool{true}, nodes)
	for _, r := range locks {
		waitCounted(t, r, 30*time.Second, all...)
	}
	h := runChurn(t, servers, locks, clients, lease, holdFor, runFor)
	t.Logf("%d grants, %d refusals, %d NOQUORUM, %d other errors, %d restarts", len(h.grants), h.refused, h.noQuorum, h.other, h.restarts)
	doubles, backs := h.check()
	for _, v := range doubles {
		t.Errorf("two holders: %s", v)
	}
	for _, v := range backs {
		t.Errorf("fence went back: %s", v)
	}
	if len(h.grants) < 3 {
		t.Errorf("only %d grants: nothing to check", len(h.grants))
	}
}

// grantRecord is one grant as its client saw it.
type grantRecord struct {
	token    string
	fence    int64
	from, to time.Time // granted (Acquire returned) .. released or validity over
}

// churnHistory is what the clients of runChurn saw.
type churnHistory struct {
	mu                       sync.Mutex
	grants                   []grantRecord
	refused, noQuorum, other int
	restarts                 int
}

// runChurn runs the clients for runFor while it kills and restarts the
// servers as TestRestartChurn says.
func runChurn(t *testing.T, servers []*redistest.Server, locks []*quorum.Redlock, clients int, lease, holdFor, runFor time.Duration) *churnHistory {
	h := &churnHistory{}
	ctx, cancel := context.WithTimeout(t.Context(), runFor)
	defer cancel()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			r := locks[c%len(locks)]
			for i := 0; ctx.Err() == nil && i < 100000; i++ {
				token := fmt.Sprintf("c%d-%d", c, i)
				start := time.Now()
				g, err := r.Acquire(ctx, "k", hold(token, lease))
				got := time.Now()
				if err != nil {
					h.count(err)
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				end := start.Add(g.Validity)
				select {
				case <-ctx.Done():
				case <-time.After(min(holdFor, time.Until(end))):
				}
				released := time.Now()
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _ = r.Release(rctx, "k", token, nil, nil)
				rcancel()
				h.mu.Lock()
				h.grants = append(h.grants, grantRecord{token: token, fence: g.Fence, from: got, to: minTime(released, end)})
				h.mu.Unlock()
			}
		})
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	restart := func(s *redistest.Server) {
		_ = s.Stop() // it may be down already
		if err := s.Restart(); err != nil {
			t.Error(err)
		}
		h.restarts++
	}
	for sec := 0; ; sec++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return h
		case <-tick.C:
		}
		first := servers[(sec/6)%len(servers)]
		switch sec % 6 {
		case 0:
			if err := first.Kill(); err != nil {
				t.Error(err)
			}
		case 1:
			restart(first)
			restart(servers[(sec/6+1)%len(servers)])
		case 2: // the third node pauses while the others are not counted yet
			if err := servers[(sec/6+2)%len(servers)].Pause(); err != nil {
				t.Error(err)
			}
		case 3:
			if err := servers[(sec/6+2)%len(servers)].Resume(); err != nil {
				t.Error(err)
			}
		}
	}
}

func (h *churnHistory) count(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case errors.Is(err, engine.ErrNotAcquired):
		h.refused++
	case errors.Is(err, engine.ErrNoQuorum):
		h.noQuorum++
	default:
		h.other++
	}
}

// check returns the pairs of grants to different tokens whose holds
// overlap, and the grants whose fence is not above the one before.
func (h *churnHistory) check() (doubles, backs []string) {
	g := slices.Clone(h.grants)
	slices.SortFunc(g, func(a, b grantRecord) int { return a.from.Compare(b.from) })
	t0 := time.Time{}
	if len(g) > 0 {
		t0 = g[0].from
	}
	show := func(r grantRecord) string {
		return fmt.Sprintf("%s fence %d held %v..%v", r.token, r.fence, r.from.Sub(t0).Round(time.Millisecond), r.to.Sub(t0).Round(time.Millisecond))
	}
	for i := range g {
		for j := i + 1; j < len(g) && g[j].from.Before(g[i].to); j++ {
			if g[j].token != g[i].token {
				doubles = append(doubles, show(g[i])+" and "+show(g[j]))
			}
		}
		if i > 0 && g[i].fence <= g[i-1].fence {
			backs = append(backs, show(g[i-1])+" then "+show(g[i]))
		}
	}
	return doubles, backs
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestStaleHoldRetriedThroughALaterInstance: nodes 0 and 1 restart empty
// after fences up to top were granted. While instance A holds them out,
// token b's refused attempt leaves its hold on both, with their counters
// after the restart (1; its rollback overtaken by b's retry, which kept the
// hold). A raises their floors and counts them again. b's client then
// retries through instance B, started after: B first sees both nodes
// vetted. Without the floor the node records with its vetted run id, B
// knew no floor for them, found b's holds there a majority with fence 1,
// and granted b fence 1 after top.
func TestStaleHoldRetriedThroughALaterInstance(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	const lease = 4 * time.Second // the hold-out: room to leave the holds before the floor
	a := restartRedlock(t, servers, lease)
	waitCounted(t, a, 30*time.Second, true, true, true)
	ctx := t.Context()
	var top int64
	for i := range 3 {
		tok := fmt.Sprintf("c%d", i)
		g, err := a.Acquire(ctx, "k", hold(tok, lease))
		if err != nil {
			t.Fatal(err)
		}
		top = max(top, g.Fence)
		heldOn(t, "k", tok, servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
		if ok, err := a.Release(ctx, "k", tok, nil, nil); !ok || err != nil {
			t.Fatalf("release %s: %v %v", tok, ok, err)
		}
	}
	for _, s := range servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	waitCounted(t, a, 30*time.Second, false, false, true)
	// What b's refused attempt leaves once the retry overtook its
	// rollback: b holds k on nodes 0 and 1, with their counters then.
	for _, s := range servers[:2] {
		n := newNode(t, RedisOptions{Addr: s.Addr()})
		c, err := n.Acquire(ctx, "k", hold("b", 30*time.Second))
		if err != nil || c.State != quorum.Acquired || c.Fence > top {
			// (A fence above top: the floor was raised first, the stage
			// took longer than the hold-out.)
			t.Fatalf("b's hold left on %s while it is held out: %+v %v (fences granted up to %d)", s.Addr(), c, err, top)
		}
	}
	waitCounted(t, a, 30*time.Second, true, true, true)
	b := restartRedlock(t, servers, lease)
	waitCounted(t, b, 30*time.Second, true, true, true)
	g, err := b.Acquire(ctx, "k", hold("b", lease))
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= top {
		t.Fatalf("b's retry through an instance started after the floors were raised: fence %d, after %d", g.Fence, top)
	}
}

// TestVettedFloorRecorded: OpFloor records, beside the vetted run id, the
// node's counter right after the raise (not the floor asked for, where
// the counter was above it) with that run id, "<counter>:<run id>", and
// answers that counter. On a node of layout 2, the record is the counter
// the migration starts from. A later raise for the same process raises
// the counter but keeps the record of its first (the holds granted since
// are not from before the floor:
// TestRetryOfAGrantMadeBetweenTwoRaisesOfTheSameProcess in quorum), and
// answers it; one without a floor (RestartedMark) leaves it and answers
// 0; a raise for another process records anew, unless that process was
// vetted already by a build that records no floor: then none is
// recorded (answer 0). (miniredis, the embedded backend, runs
// the same script.)
func TestVettedFloorRecorded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		run, run2 := strings.Repeat("a", 40), strings.Repeat("b", 40)
		floor := func(fence int64, run, vetted string, want, counter int64, rec string) {
			t.Helper()
			r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: fence, Token: run})
			if r.Err != nil || !r.OK || r.Claim.Counter != want {
				t.Fatalf("OpFloor(%d, %s) = %+v, want counter %d", fence, run, r, want)
			}
			if v := raw.Get(ctx, DefaultPrefix+"vetted").Val(); v != vetted {
				t.Fatalf("vetted %q after OpFloor for %s, want %q", v, run, vetted)
			}
			if v := raw.Get(ctx, DefaultPrefix+"vetted-floor").Val(); v != rec {
				t.Fatalf("vetted floor %q after OpFloor(%d, %s), want %q", v, fence, run, rec)
			}
			if c, _ := raw.Get(ctx, DefaultPrefix+"layout").Int64(); c != counter {
				t.Fatalf("counter %d after OpFloor(%d, %s), want %d", c, fence, run, counter)
			}
		}
		// A node of layout 2: its counter is field fence of the layout hash.
		if err := raw.HSet(ctx, DefaultPrefix+"layout", "fence", 50, "version", "2").Err(); err != nil {
			t.Fatal(err)
		}
		floor(7, run, run, 50, 50, "50:"+run)
		mustAcquire(t, n, "k", hold("a", time.Minute)) // 51
		// Raised again for the same process, to a time floor: the counter
		// is, written whole; the record stays.
		floor(1795840067212561, run, run, 50, 1795840067212561, "50:"+run)
		floor(0, quorum.RestartedMark, quorum.RestartedMark, 0, 1795840067212561, "50:"+run)
		floor(7, run2, run2, 1795840067212561, 1795840067212561, "1795840067212561:"+run2)
		// A process vetted by a build before the record (up to 65a4181):
		// raised again, no counter is recorded for it, none is known.
		run3 := strings.Repeat("c", 40)
		raw.Set(ctx, DefaultPrefix+"vetted", run3, 0)
		floor(7, run3, run3, 0, 1795840067212561, "1795840067212561:"+run2)
	})
}

// TestStatusReadsTheVettedFloor: the status read gives the recorded floor
// only for the process that answers: none once the record names another
// (the node restarted since, or an older build, which does not write the
// record, vetted it since). A record that cannot be read (not
// "<counter>:<run id>", or another type) is as none: the read does not
// fail (TestUnreadableVettedFloorCountedAgain). (miniredis answers no INFO
// server: the restart rule does not run on the embedded backend.)
func TestStatusReadsTheVettedFloor(t *testing.T) {
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
	run := status().RunID
	if s := status(); s.Floor != 0 {
		t.Fatalf("status before any floor: %+v, want no floor", s)
	}
	mustAcquire(t, n, "k", hold("a", time.Minute))
	if r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 40, Token: run}); r.Err != nil || !r.OK {
		t.Fatalf("OpFloor: %+v", r)
	}
	mustAcquire(t, n, "k2", hold("a", time.Minute)) // 41
	if s := status(); s.Vetted != run || s.Floor != 40 || s.FenceMax != 41 {
		t.Fatalf("status after the floor: %+v, want vetted %s, floor 40, counter 41", s, run)
	}
	// Another process's record, this one vetted by an older build.
	raw.Set(ctx, DefaultPrefix+"vetted-floor", "90:"+strings.Repeat("e", 40), 0)
	if s := status(); s.Vetted != run || s.Floor != 0 {
		t.Fatalf("status with another process's record: %+v, want no floor", s)
	}
	raw.Set(ctx, DefaultPrefix+"vetted-floor", "ninety:"+run, 0)
	if s := status(); s.Vetted != run || s.Floor != 0 {
		t.Fatalf("status with an unreadable record: %+v, want no floor", s)
	}
	raw.Del(ctx, DefaultPrefix+"vetted-floor")
	raw.HSet(ctx, DefaultPrefix+"vetted-floor", "90", run)
	if s := status(); s.Vetted != run || s.Floor != 0 {
		t.Fatalf("status with a record of another type: %+v, want no floor", s)
	}
	raw.Del(ctx, DefaultPrefix+"vetted-floor")
	raw.Set(ctx, DefaultPrefix+"vetted-floor", "90:"+run, 0)
	if s := status(); s.Floor != 90 {
		t.Fatalf("status after the record was mended: %+v, want floor 90", s)
	}
}

// TestUnreadableVettedFloorCountedAgain: a node whose
// lockproxy:vetted-floor cannot be read (another type, or not
// "<counter>:<run id>": written by something else than floor.lua) is held
// out like any node not verified durable, and counted once its hold-out
// is over; its floor's raise mends the record. When an unreadable record
// failed the status read, the node's status was never read again: held
// out for good, and every other read of it lost (a restart of it went
// unnoticed but by its replies).
func TestUnreadableVettedFloorCountedAgain(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	ctx := testCtx(t)
	raw0, raw1 := rawClient(t, servers[0].Addr()), rawClient(t, servers[1].Addr())
	if err := raw0.HSet(ctx, DefaultPrefix+"vetted-floor", "not", "a string").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw1.Set(ctx, DefaultPrefix+"vetted-floor", "ninety:x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := restartRedlock(t, servers, 500*time.Millisecond)
	waitCounted(t, r, 20*time.Second, true, true, true)
	for i, raw := range []*redis.Client{raw0, raw1} {
		v, err := raw.Get(ctx, DefaultPrefix+"vetted-floor").Result()
		if _, _, ok := strings.Cut(v, ":"); err != nil || !ok || strings.HasPrefix(v, "ninety") {
			t.Fatalf("node %d's vetted floor after its raise: %q, %v", i, v, err)
		}
	}
}

// TestSecondRaiseKeepsTheRecord: node 0 restarts empty; instance A holds
// it out, raises its floor and counts it again; b is granted through A
// by the three nodes. Then the late raise of a second instance that read
// node 0 before A's raise reaches it, for the same process, with the floor
// it computed then. Node 2 goes down, and b's client retries through
// instance C, started after: node 0 keeps the counter recorded at its
// first raise, below b's fence there, so C counts b's holds on nodes 0
// and 1, a majority recording its grant's fence, and answers it. When the
// second raise overwrote the record with the node's counter then (above
// b's fence), C set b's hold on node 0 aside and committed a new fence
// (seen: 1795904757768017 after its grant's 1795904757768016; the
// counters are in µs since A first raised the new nodes to the time).
func TestSecondRaiseKeepsTheRecord(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	const lease = 4 * time.Second
	a := restartRedlock(t, servers, lease)
	waitCounted(t, a, 30*time.Second, true, true, true)
	ctx := t.Context()
	for i := range 3 {
		tok := fmt.Sprintf("c%d", i)
		if _, err := a.Acquire(ctx, "k", hold(tok, lease)); err != nil {
			t.Fatal(err)
		}
		if ok, err := a.Release(ctx, "k", tok, nil, nil); !ok || err != nil {
			t.Fatalf("release %s: %v %v", tok, ok, err)
		}
	}
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	n0 := newNode(t, RedisOptions{Addr: servers[0].Addr()})
	st := n0.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
	if st.Err != nil {
		t.Fatal(st.Err)
	}
	waitCounted(t, a, 30*time.Second, false, true, true)
	waitCounted(t, a, 30*time.Second, true, true, true)
	g, err := a.Acquire(ctx, "k", hold("b", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "b", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	// The second instance's late raise, with the floor it computed from
	// its read before A's (the counter the node had then).
	if r := n0.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: max(st.Status.FenceMax, 1), Token: st.Status.RunID}); r.Err != nil || !r.OK {
		t.Fatalf("the late raise: %+v", r)
	}
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	c := restartRedlock(t, servers, lease)
	waitCounted(t, c, 30*time.Second, true, true, false)
	// b's client renews its lease (through A, on nodes 0 and 1), so that
	// its retry comes within it on a loaded host.
	if _, err := a.Extend(ctx, "k", "b", lease, ""); err != nil {
		t.Fatalf("b's renewal: %v", err)
	}
	again, err := c.Acquire(ctx, "k", hold("b", lease))
	if err != nil {
		t.Fatal(err)
	}
	if again.Fence != g.Fence {
		t.Fatalf("b's retry through C while it holds the key on nodes 0 and 1: fence %d, its grant's %d", again.Fence, g.Fence)
	}
}
