package upstream

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Interleavings against the clock-jump hold-out (quorum/clock.go) and the
// checks that feed it (clock.go), on real redis-servers with node 0 under
// a clock shim.

// TestAttackSkewHoldShortenedBySecondJump: TestAttackSkewRestartRuleOff,
// and then node 0's clock is set right again (stepped back the 10 s), as
// NTP does once it notices. Instance B (restart rule off) held node 0 out
// for the 10 s it was off at first contact; the step back is a second
// jump, and B's hold for it is the longest lease B granted: none. Before
// a hold could only grow, that second hold replaced the first: node 0
// counted again at once, k (dropped there by the +10 s step) was free on
// nodes 0 and 2, and B granted it to b while a's validity ran.
func TestAttackSkewHoldShortenedBySecondJump(t *testing.T) {
	const lease = 5 * time.Second
	servers, clock, _, rA := attackNodes(t, lease, nil)
	ctx := testCtx(t)
	nodes, g, start := jumpedAfterGrant(t, servers, clock, rA, lease)
	rB := quorum.New(nodes, quorum.Config{})
	t.Cleanup(func() { rB.Close() })
	try := func(what string) {
		t.Helper()
		gb, err := rB.Acquire(ctx, "k", hold("b", lease))
		if err == nil && time.Since(start) < g.Validity {
			t.Fatalf("%s: instance B (restart rule off) granted k to b (fence %d) %v into a's validity %v (a's fence %d); node 0's clock %v, held out %+v",
				what, gb.Fence, time.Since(start), g.Validity, g.Fence, nodes[0].(*RedisNode).Clock(), rB.HeldOut())
		}
		if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			t.Fatalf("%s: b: %v", what, err)
		}
	}
	try("first contact") // node 0 is 10 s off: held out for that
	if h := rB.HeldOut(); len(h) != 1 || h[0].Node != 0 || h[0].Left < 5*time.Second {
		t.Fatalf("after node 0's first reply, 10 s off: held out %+v; want node 0 for about 10 s", h)
	}
	if _, err := clock.Step(-10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
	for i := 0; i < 3; i++ {
		try("after the step back")
		time.Sleep(20 * time.Millisecond)
	}
	if c := nodes[0].(*RedisNode).Clock(); c.Jumps != 2 {
		t.Errorf("node 0's clock as B sees it: %v; want the first contact and the step back as jumps", c)
	}
}

// TestAttackJumpSeenByStatusHeldBeforeNextVote: the restart rule's status
// read goes through go-redis's pool, on a goroutine of its own, not the
// node's reader. It reads node 0's clock after a +10 s step first: that
// is the jump, and its reply's observer holds the node out (the
// instance's record). Until that observer runs, the node's reader goes on:
// an acquire read meanwhile, in step with the stepped clock, showed
// nothing and was answered as a vote, counted before the hold landed. Here
// the status's observer is held up (a goroutine descheduled between the
// two); the acquire read meanwhile must carry the jump too.
func TestAttackJumpSeenByStatusHeldBeforeNextVote(t *testing.T) {
	n, _, _, release, late := stepSeenByLateStatus(t)
	ctx := testCtx(t)
	c, err := n.Acquire(ctx, "k", hold("b", time.Minute))
	close(release)
	if r := <-late; !errors.Is(r.Err, quorum.ErrClockJumped) {
		t.Errorf("status read after the step: %v; want the jump", r.Err)
	}
	if !errors.Is(err, quorum.ErrClockJumped) {
		t.Fatalf("acquire read after the status read saw the jump, before its observer held the node out: %+v %v; want the jump, not a vote", c, err)
	}
	if _, err := n.Acquire(ctx, "k2", hold("b", time.Minute)); err != nil {
		t.Fatalf("acquire once the status read's observer ran: %v", err)
	}
}

// TestAttackJumpForwardAndBackBetweenReadings: a holds k on nodes 0 and 1
// only (node 2 missed the grant). Between two readings of node 0's clock,
// it steps 10 s forward, Redis drops a's key there (expired by the
// stepped clock), and it steps back again: net zero. No reply ever reads
// the stepped clock, so no instance sees a jump, neither the one that
// granted a's lock nor one with a baseline from before (B); B's next
// acquire finds k free on nodes 0 and 2 and grants it while a's validity
// runs.
//
// Known: a clock is read only with the replies (TIME at the end of a
// pipeline); an excursion between two of them leaves nothing to read. In
// an instance the health probe reads every node once a second, so an
// excursion seen by no instance is one shorter than that, or one while
// the node was cut off from every instance. Seeing it would take a
// witness on the node that outlives the excursion (a canary key whose
// early expiry shows the step), a write per node per batch.
func TestAttackJumpForwardAndBackBetweenReadings(t *testing.T) {
	t.Skip("known: a clock excursion between two readings of a node's clock (stepped forward, keys dropped, stepped back) leaves no reading that shows it; see the comment")
	const lease = 5 * time.Second
	servers, clock, _, rA := attackNodes(t, lease, nil)
	ctx := testCtx(t)
	rB, nodes := skewedRedlock(t, servers, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond})
	waitCounted(t, rB, 30*time.Second, true, true, true)
	if _, err := rB.Acquire(ctx, "warm", hold("w", lease)); err != nil { // a baseline and the scripts on every node
		t.Fatal(err)
	}
	start := time.Now()
	g, err := rA.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	if err := rawClient(t, servers[2].Addr()).Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, servers[0].Addr())
	eventually(t, testTimeout, "node 0 drops k by its stepped clock", func() bool {
		n, err := raw.Exists(ctx, "k").Result()
		return err == nil && n == 0
	})
	if _, err := clock.Step(-10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	gb, err := rB.Acquire(ctx, "k", hold("b", lease))
	if err == nil && time.Since(start) < g.Validity {
		t.Fatalf("instance B granted k to b (fence %d) %v into a's validity %v (a's fence %d); node 0's clock as B sees it: %v",
			gb.Fence, time.Since(start), g.Validity, g.Fence, nodes[0].(*RedisNode).Clock())
	}
	if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("b: %v", err)
	}
}

// TestAttackSkewRestartRuleOffRunningInstance: TestAttackSkewRestartRuleOff
// for an instance B that was running before the step (restart rule off:
// MaxLease 0), and had granted a 100 ms lease only. It sees node 0's +10 s
// step between two replies, not at first contact, and held the node out
// for the longest lease it granted, 100 ms: then it counted node 0, where
// the step dropped a's key, and granted k to b while a's 5 s validity ran.
// A node whose clock stepped forward by J drops each key at most J early,
// so every lock it dropped has run out J after the step, whoever granted
// it: the hold is at least the step, as at first contact.
func TestAttackSkewRestartRuleOffRunningInstance(t *testing.T) {
	const lease = 5 * time.Second
	servers, clock, _, rA := attackNodes(t, lease, nil)
	ctx := testCtx(t)
	rB, nodes := skewedRedlock(t, servers, quorum.Config{})
	if _, err := rB.Acquire(ctx, "warm", hold("w", 100*time.Millisecond)); err != nil { // a baseline on every node
		t.Fatal(err)
	}
	start := time.Now()
	g, err := rA.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	if err := rawClient(t, servers[2].Addr()).Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	for i := 0; i < 5; i++ {
		gb, err := rB.Acquire(ctx, "k", hold("b", lease))
		if err == nil && time.Since(start) < g.Validity {
			t.Fatalf("attempt %d: instance B (restart rule off, running before the step) granted k to b (fence %d) %v into a's validity %v (a's fence %d); node 0's clock %v",
				i, gb.Fence, time.Since(start), g.Validity, g.Fence, nodes[0].(*RedisNode).Clock())
		}
		if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			t.Fatalf("b: %v", err)
		}
		time.Sleep(60 * time.Millisecond)
	}
	if c := nodes[0].(*RedisNode).Clock(); c.Jumps != 1 {
		t.Errorf("node 0's clock as B sees it: %v; want the +10s step counted as a jump", c)
	}
}

// TestAttackSkewRestartRuleOffBehindBefore: node 0's clock runs 0.9 s
// behind (within the 1 s skew allowed), a holds k on nodes 0 and 1 with a
// 2 s lease, and node 0 steps 2.4 s forward: 1.5 s ahead now, and a's key
// dropped there. Instance B (restart rule off), started after the step,
// finds node 0 1.5 s off its clock at first contact and held it out for
// that offset, 1.5 s: but the node may have been up to the skew behind
// before, so it dropped keys up to 2.5 s early; B counted it again and
// granted k to b while a's validity ran. The hold is the offset plus the
// skew.
func TestAttackSkewRestartRuleOffBehindBefore(t *testing.T) {
	const lease = 2 * time.Second
	durable := redistest.Options{AppendFsyncAlways: true}
	jumper, clock := clockshim.StartRedis(t, durable)
	others := redistest.StartN(t, 2, durable)
	servers := []*redistest.Server{jumper, others[0], others[1]}
	if err := clock.Set(-900 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	rA, _ := skewedRedlock(t, servers, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond})
	waitCounted(t, rA, 30*time.Second, true, true, true)
	ctx := testCtx(t)
	start := time.Now()
	g, err := rA.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	if err := rawClient(t, servers[2].Addr()).Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := clock.Step(2400 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	rB, nodes := skewedRedlock(t, servers, quorum.Config{})
	for i := 0; time.Since(start) < g.Validity && i < 100; i++ {
		gb, err := rB.Acquire(ctx, "k", hold("b", lease))
		if err == nil && time.Since(start) < g.Validity {
			t.Fatalf("attempt %d: instance B (restart rule off) granted k to b (fence %d) %v into a's validity %v (a's fence %d); node 0's clock %v",
				i, gb.Fence, time.Since(start), g.Validity, g.Fence, nodes[0].(*RedisNode).Clock())
		}
		if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			t.Fatalf("b: %v", err)
		}
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := nodes[0].(*RedisNode).Clock(); c.Jumps != 1 {
		t.Errorf("node 0's clock as B sees it: %v; want its first reply taken as a jump", c)
	}
}

// TestAttackTimeDeniedIsNoVote: a node whose TIME fails (an ACL without
// +time, a renamed command) while the scripts run: every batch's clock
// reading is an error. Taken as no reading, the clock check was off for
// that node with nothing said, and its votes counted however its clock
// stepped. A batch that must show the node's clock and cannot is answered
// with the error: its votes do not count.
func TestAttackTimeDeniedIsNoVote(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	ctx := testCtx(t)
	if err := rawClient(t, s.Addr()).Do(ctx, "ACL", "SETUSER", "default", "-time").Err(); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, RedisOptions{Addr: s.Addr(), ClockSkew: time.Second})
	c, err := n.Acquire(ctx, "k", hold("a", time.Minute))
	if err == nil {
		t.Fatalf("acquire on a node whose TIME is denied: %+v, a vote; want an error", c)
	}
	if !errors.Is(err, ErrNoClock) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("acquire on a node whose TIME is denied: %v; want ErrNoClock with the node's reply", err)
	}
	// Releases read no clock (clockless): they still work.
	if _, err := n.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("release on a node whose TIME is denied: %v", err)
	}
}

// TestAttackSkewOwnClockSteppedWithMajority: one time source steps the
// clocks of nodes 0 and 1 and of the host of a new instance B by +10 s
// (node 2 and the instance that granted a's lock are elsewhere). a holds
// k on all three nodes; nodes 0 and 1 drop it. B's first contact finds
// nodes 0 and 1 in step with its own (stepped) clock and node 2 10 s off:
// it holds node 2 out and counts 0 and 1, a majority, and grants k to b
// while a's validity runs.
//
// Known: the first-contact check has this instance's wall clock as its
// only reference; it cannot tell "nodes 0 and 1 and I stepped" from "node
// 2 stepped back" (which drops nothing). Holding out every node when the
// nodes disagree by more than the skew would cost every instance started
// while one node is off (out of the deployment's sync) the whole quorum
// for max_lease_ms.
func TestAttackSkewOwnClockSteppedWithMajority(t *testing.T) {
	t.Skip("known: the first-contact check trusts the new instance's own wall clock; a step shared by its host and a majority of the nodes is not seen; see the comment")
	const lease = 5 * time.Second
	durable := redistest.Options{AppendFsyncAlways: true}
	j0, c0 := clockshim.StartRedis(t, durable)
	j1, c1 := clockshim.StartRedis(t, durable)
	servers := []*redistest.Server{j0, j1, redistest.Start(t, durable)}
	rA, _ := skewedRedlock(t, servers, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond})
	waitCounted(t, rA, 30*time.Second, true, true, true)
	ctx := testCtx(t)
	start := time.Now()
	g, err := rA.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	for _, c := range []interface {
		Step(time.Duration) (time.Duration, error)
	}{c0, c1} {
		if _, err := c.Step(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	stepped := func() time.Duration { return wallAnchor() + 10*time.Second } // B's host clock, stepped
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		n := newNode(t, RedisOptions{Addr: s.Addr(), ClockSkew: time.Second})
		n.clock.anchor = stepped
		nodes[i] = n
	}
	rB := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond})
	t.Cleanup(func() { rB.Close() })
	waitCounted(t, rB, 30*time.Second, true, true, false)
	gb, err := rB.Acquire(ctx, "k", hold("b", lease))
	if err == nil && time.Since(start) < g.Validity {
		t.Fatalf("instance B granted k to b (fence %d) %v into a's validity %v (a's fence %d)", gb.Fence, time.Since(start), g.Validity, g.Fence)
	}
	if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
		t.Fatalf("b: %v", err)
	}
}

// stepSeenByLateStatus starts a redis-server under the clock shim and a
// node whose observer holds up the first call that carries a clock jump
// until release is closed (a goroutine descheduled between the reply and
// its observer). It steps the node's clock 10 s forward and sends a status
// read, which carries the jump, and returns once that read's observer is
// held: jump is the error it carries, late will have its reply. A test
// that fails before it closes release is let go by a cleanup.
func stepSeenByLateStatus(t *testing.T) (n *RedisNode, clock *clockshim.Clock, jump *error, release chan struct{}, late chan quorum.Reply) {
	t.Helper()
	s, clock := clockshim.StartRedis(t, redistest.Options{})
	seen, release := make(chan struct{}), make(chan struct{})
	jump = new(error)
	var once sync.Once
	observe := func(_ time.Duration, err error) {
		if errors.Is(err, quorum.ErrClockJumped) {
			blocked := false
			once.Do(func() { blocked, *jump = true, err })
			if blocked {
				close(seen)
				<-release
			}
		}
	}
	n = newNode(t, RedisOptions{Addr: s.Addr(), Observe: observe})
	ctx := testCtx(t)
	status := func() quorum.Reply {
		done := make(quorum.Replies, 1)
		n.Do(ctx, &quorum.Op{Kind: quorum.OpStatus}, 0, done)
		return <-done
	}
	if r := status(); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := n.Acquire(ctx, "warm", hold("a", time.Minute)); err != nil { // loads the scripts
		t.Fatal(err)
	}
	if _, err := clock.Step(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
	late = make(chan quorum.Reply, 1)
	go func() { late <- status() }()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	select {
	case <-seen:
	case <-time.After(testTimeout):
		t.Fatal("the status read after the step did not carry the jump")
	}
	return n, clock, jump, release, late
}

// skewedRedlock is a Redlock over servers, and its nodes, which check the
// first reply against this process's clock with a 1 s skew; it is closed
// at the test's end.
func skewedRedlock(t *testing.T, servers []*redistest.Server, cfg quorum.Config) (*quorum.Redlock, []quorum.Node) {
	t.Helper()
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr(), ClockSkew: time.Second})
	}
	r := quorum.New(nodes, cfg)
	t.Cleanup(func() { r.Close() })
	return r, nodes
}
