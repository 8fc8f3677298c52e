package instance_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	if zk := os.Getenv("LOCKPROXY_TEST_SERVE_ZK"); zk != "" {
		serveZK(zk) // the lockproxy that TestZooKeeperLockproxyKilled kills
		return
	}
	if addr := os.Getenv("LOCKPROXY_TEST_HOLDER_ADDR"); addr != "" {
		holdAndHang(addr, os.Getenv("LOCKPROXY_TEST_HOLDER_KEY"))
		return
	}
	os.Exit(m.Run())
}

// holdAndHang is the child process of TestBoundLockReleasedWhenClientKilled:
// it takes a connection-bound lock, says so, and waits to be killed.
func holdAndHang(addr, key string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	v, err := c.Do(context.Background(), "LOCK", key).Slice()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("granted", v[1])
	time.Sleep(time.Minute) // bounded: the parent kills it long before
	os.Exit(3)
}

// startHolder runs a client process (this test binary, see holdAndHang)
// that takes a connection-bound lock on key and waits to be killed; it
// returns once the lock is granted.
func startHolder(t *testing.T, addr, key string) *exec.Cmd {
	t.Helper()
	child, line := startChild(t, "LOCKPROXY_TEST_HOLDER_ADDR="+addr, "LOCKPROXY_TEST_HOLDER_KEY="+key)
	if !strings.HasPrefix(line, "granted") {
		t.Fatalf("child: %q", line)
	}
	return child
}

// startChild runs this test binary, running no test, with env added (its
// TestMain turns it into the child), and returns it with the first line it
// prints. The child is killed when the test ends.
func startChild(t *testing.T, env ...string) (*exec.Cmd, string) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), env...)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %q %v", line, err)
	}
	return child, strings.TrimSpace(line)
}

// TestBoundLockReleasedWhenClientKilled: a client process holding a
// connection-bound lock is killed with SIGKILL, without QUIT; lockproxy
// sees the connection close and releases the lock, and another client
// acquires it. The bound lease is a minute, so expiry cannot stand in for
// the release within the 30 s the test waits.
func TestBoundLockReleasedWhenClientKilled(t *testing.T) {
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Locks.BoundLeaseMS = 60000
	in := startInstance(t, cfg)
	key := uniqueKey(t)
	child := startHolder(t, in.Addr(), key)
	c := newClient(t, in.Addr(), 2)
	if _, ok, _ := lock(context.Background(), c, key, "PX", 1000); ok {
		t.Fatal("granted while the child holds the lock")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	eventually(t, 30*time.Second, "the lock is released when its holder is killed", func() bool {
		_, ok, _ := lock(context.Background(), c, key, "PX", 1000)
		return ok
	})
	t.Logf("acquired %v after the holder was killed", time.Since(killed).Round(time.Millisecond))
}

// grantChecker catches a double grant and a fence that does not increase.
type grantChecker struct {
	holding atomic.Int32
	mu      sync.Mutex
	last    int64
	grants  int
}

// enter records a grant of fence; it fails if another holder is inside or
// the fence is not larger than every fence granted before.
func (g *grantChecker) enter(fence int64) error {
	if n := g.holding.Add(1); n != 1 {
		return fmt.Errorf("double grant: %d holders at once", n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if fence <= g.last {
		return fmt.Errorf("fence %d granted after %d", fence, g.last)
	}
	g.last = fence
	g.grants++
	return nil
}

func (g *grantChecker) leave() { g.holding.Add(-1) }

func (g *grantChecker) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants
}

// TestFencingAcrossInstancesAndRestart: up to 1,000 grants (at least 250)
// of one key spread over two lockproxy instances on the same three nodes
// while one node is killed and restarted, another is paused (SIGSTOP) past
// the node timeout and resumed, and a third is killed and restarted. No
// two holders at once; every fence is larger than the one before.
func TestFencingAcrossInstancesAndRestart(t *testing.T) {
	check := grantUnderFaults(t, 1000, 250, grantOnce)
	t.Logf("%d grants, last fence %d, through 3 node faults", check.count(), check.last)
}

// grantUnderFaults starts three nodes (fsync always) and two instances,
// runs six clients spread over them, each calling once in a loop, until
// want grants are checked or 90 s have passed, while one node is killed
// and restarted, another paused past the node timeout and resumed, and a
// third killed and restarted, one fault per quarter of least grants — so
// all three happen however slow the machine is. At least least grants
// must be checked, the last quarter of them after the last fault. A
// client's error fails the test.
func grantUnderFaults(t *testing.T, want, least int,
	once func(ctx context.Context, c *redis.Client, key string, check *grantChecker) error) *grantChecker {
	t.Helper()
	nodes := redistest.StartN(t, 3, redistest.Options{AppendFsyncAlways: true})
	cfg := testConfig(nodes)
	instances := []string{startInstance(t, cfg).Addr(), startInstance(t, cfg).Addr()}
	key := uniqueKey(t)
	check := &grantChecker{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := range 6 {
		c := newClient(t, instances[w%2], 2)
		wg.Go(func() {
			for ctx.Err() == nil && check.count() < want {
				if err := once(ctx, c, key, check); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	faults := []func() error{
		func() error { return outage(nodes[1].Kill, nodes[1].Restart) },
		func() error { return outage(nodes[0].Pause, nodes[0].Resume) },
		func() error { return outage(nodes[2].Kill, nodes[2].Restart) },
	}
	done := 0
	for ctx.Err() == nil && check.count() < want {
		if done < len(faults) && check.count() > (done+1)*least/4 {
			if err := faults[done](); err != nil {
				t.Fatal(err)
			}
			done++
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := check.count(); got < least || done != len(faults) {
		t.Fatalf("%d grants (want at least %d) and %d of %d faults before the deadline", got, least, done, len(faults))
	}
	return check
}

// outage takes a node down, lets grants go on with two of three for longer
// than the node timeout, and brings it back.
func outage(down, up func() error) error {
	if err := down(); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	return up()
}

// grantOnce tries LOCK once; when granted it checks the grant, then unlocks.
func grantOnce(ctx context.Context, c *redis.Client, key string, check *grantChecker) error {
	g, ok, err := lock(ctx, c, key, "PX", 1000)
	if err != nil || !ok {
		return nil // held by another worker, or NOQUORUM while a node restarts: try again
	}
	if err := check.enter(g.fence); err != nil {
		return err
	}
	time.Sleep(200 * time.Microsecond) // hold it: a second holder would overlap
	check.leave()
	err = c.Do(ctx, "UNLOCK", key, g.token).Err()
	if err != nil && ctx.Err() == nil && !strings.HasPrefix(err.Error(), "NOQUORUM") && !strings.HasPrefix(err.Error(), "TIMEOUT outcome unknown") {
		return fmt.Errorf("UNLOCK: %w", err) // NOQUORUM or unknown during a fault: the lease expires
	}
	return nil
}
