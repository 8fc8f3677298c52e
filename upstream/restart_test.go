package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
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
