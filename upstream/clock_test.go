package upstream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Tests of the clock-jump rule (upstream/clock.go, quorum/clock.go) on
// real redis-servers, one of them under a wall-clock shim of our own
// (internal/clockshim).

// TestClockJumpAnswersTheBatchThatSawIt: a node's first reply is the
// baseline; after its clock steps, the next pipeline's calls are answered
// with ErrClockJumped, and the one after counts again (it is the new
// baseline). Calls without a step never see a jump.
func TestClockJumpAnswersTheBatchThatSawIt(t *testing.T) {
	s, clock := clockshim.StartRedis(t, redistest.Options{})
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	ctx := testCtx(t)
	for i := range 50 {
		if _, _, err := n.Inspect(ctx, "k"); err != nil {
			t.Fatalf("call %d without a step: %v", i, err)
		}
	}
	if c := n.Clock(); !c.Known || c.Jumps != 0 || c.Offset < -time.Second || c.Offset > time.Second {
		t.Fatalf("clock after calls without a step: %+v", c)
	}
	for _, step := range []time.Duration{3 * time.Second, -7 * time.Second} {
		if _, err := clock.Step(step); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // the shim reads its file at most once a millisecond
		_, _, err := n.Inspect(ctx, "k")
		var j *quorum.ClockJumpError
		if !errors.Is(err, quorum.ErrClockJumped) || !errors.As(err, &j) {
			t.Fatalf("call after a %v step: %v, want ErrClockJumped", step, err)
		}
		if d := j.Jump - step; d < -200*time.Millisecond || d > 200*time.Millisecond {
			t.Fatalf("jump %v reported for a %v step", j.Jump, step)
		}
		if _, _, err := n.Inspect(ctx, "k"); err != nil {
			t.Fatalf("call after the jump was seen: %v", err)
		}
	}
	if c := n.Clock(); c.Jumps != 2 {
		t.Fatalf("jumps counted: %+v", c)
	}
}

// TestClockJumpNoSecondGrantAndHolderTold: a lock held on exactly two of
// three nodes (the third was down when it was granted and came back
// empty); one of the two steps its clock. Another client must not get the
// lock while the first holder's validity runs, and the holder is told at
// once (OnLost, reason "node clock jumped"): forward steps of 2×, 10× and
// 100× the lease's drift allowance, +10 s, and a step back.
func TestClockJumpNoSecondGrantAndHolderTold(t *testing.T) {
	const lease = 5 * time.Second
	drift := time.Duration(float64(lease)*quorum.DefaultDriftFactor) + quorum.DefaultDriftFixed // 52ms
	for _, step := range []time.Duration{2 * drift, 10 * drift, 100 * drift, 10 * time.Second, -10 * time.Second} {
		t.Run(fmt.Sprintf("step%+v", step), func(t *testing.T) {
			clockJumpCase(t, lease, step)
		})
	}
}

func clockJumpCase(t *testing.T, lease, step time.Duration) {
	durable := redistest.Options{AppendFsyncAlways: true} // counted at once: no wait for the restart rule
	jumper, clock := clockshim.StartRedis(t, durable)
	others := redistest.StartN(t, 2, durable)
	servers := []*redistest.Server{jumper, others[0], others[1]}
	var mu sync.Mutex
	var lost []string
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	counted := map[int]bool{}
	r := quorum.New(nodes, quorum.Config{MaxLease: lease, StatusEvery: 100 * time.Millisecond,
		OnTrust: func(i int, ok bool, _ string) {
			mu.Lock()
			defer mu.Unlock()
			counted[i] = ok
		},
		OnLost: func(key, token, reason string) {
			mu.Lock()
			defer mu.Unlock()
			lost = append(lost, key+" "+token+" "+reason)
		}})
	t.Cleanup(func() { r.Close() })
	waitCounted(t, r, 30*time.Second, true, true, true)
	ctx := testCtx(t)

	// Node 2 is down while a takes the lock, and comes back without it.
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g, err := r.Acquire(ctx, "k", hold("a", lease))
	if err != nil {
		t.Fatal(err)
	}
	heldUntil := start.Add(g.Validity)
	if err := servers[2].Restart(); err != nil {
		t.Fatal(err)
	}
	waitCounted(t, r, 10*time.Second, true, true, true)

	if _, err := clock.Step(step); err != nil {
		t.Fatal(err)
	}
	stepped := time.Now()
	// b tries while a's validity runs: every try is refused. The first try
	// after the holder was told notes the hold-out and OnTrust's word, well
	// inside the hold-out (MaxLease from the jump's detection): after the
	// loop, under load, it may have run out.
	tries := 0
	var held []quorum.HeldOut
	sampled, trusted := false, true
	sample := func() {
		sampled, held = true, r.HeldOut()
		mu.Lock()
		trusted = counted[0]
		mu.Unlock()
	}
	for time.Now().Before(heldUntil) && tries < 2000 {
		tries++
		gb, err := r.Acquire(ctx, "k", hold("b", lease))
		if err == nil && time.Since(start) < g.Validity {
			t.Fatalf("b granted (fence %d) %v into a's validity of %v, %v after a %v step of node 0's clock",
				gb.Fence, time.Since(start), g.Validity, time.Since(stepped), step)
		}
		if err == nil {
			break // a try begun inside a's validity, granted after it (a loaded machine)
		}
		if !errors.Is(err, engine.ErrNotAcquired) && !errors.Is(err, engine.ErrNoQuorum) {
			t.Fatalf("b's acquire: %v", err)
		}
		mu.Lock()
		first := !sampled && len(lost) > 0
		mu.Unlock()
		if first {
			sample()
		}
		time.Sleep(2 * time.Millisecond)
	}
	mu.Lock()
	told := lost
	mu.Unlock()
	if len(told) != 1 || told[0] != "k a "+quorum.LostClockJumped {
		t.Fatalf("holder told %q after a %v step, want one \"k a %s\"", told, step, quorum.LostClockJumped)
	}
	if !sampled { // told after b's last try
		sample()
	}
	if len(held) == 0 || held[0].Node != 0 || !held[0].Clock {
		t.Fatalf("held out when the holder was told of a %v step: %+v, want node 0 for its clock", step, held)
	}
	if trusted {
		t.Fatalf("OnTrust says node 0 counts again during its clock hold-out (%v step)", step)
	}
	t.Logf("%v step: %d tries by b refused while a's validity ran; node 0 %s", step, tries, held[0].Why)
}

// TestClockRidesOnGrantsNotReleases: a pipeline of acquires or renewals
// ends with the node's TIME, one of releases only does not (pipeline.go,
// clockless): an uncontended LOCK+UNLOCK costs each node one TIME.
func TestClockRidesOnGrantsNotReleases(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	raw := rawClient(t, s.Addr())
	n := newNode(t, RedisOptions{Addr: s.Addr()})
	ctx := testCtx(t)
	step := func(what string, want int64, do func() error) {
		t.Helper()
		if err := do(); err != nil { // loads the script (NOSCRIPT, then EVAL: two pipelines)
			t.Fatalf("%s: %v", what, err)
		}
		before := cmdCalls(t, raw, "time")
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := cmdCalls(t, raw, "time") - before; got != want {
			t.Errorf("%s: %d TIME calls, want %d", what, got, want)
		}
	}
	step("acquire", 1, func() error { _, err := n.Acquire(ctx, "k", hold("a", 10*time.Second)); return err })
	step("extend", 1, func() error { _, err := n.Extend(ctx, "k", "a", 10*time.Second, ""); return err })
	step("release", 0, func() error { _, err := n.Release(ctx, "k", "a"); return err })
}

// cmdCalls is how many times the node has run command name.
func cmdCalls(t *testing.T, raw *redis.Client, name string) int64 {
	t.Helper()
	info, err := raw.Info(testCtx(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
			v, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}
