package instance_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/zktest"
	"go.uber.org/zap"
)

// The zookeeper backend's own guarantees, beyond the conformance suite:
// a leader change, lockproxy killed, and a session that expires.

// TestZooKeeperLeaderKilled: over a 3-server ensemble, a held lock and a
// waiter survive the loss of the leader; the waiter gets the lock when the
// holder releases it; fences keep increasing across the leader change.
func TestZooKeeperLeaderKilled(t *testing.T) {
	ens := zktest.StartEnsemble(t, 3)
	cfg := zkConfig(ens.Servers()[0])
	cfg.ZooKeeper.Servers = ens.Addrs()
	cfg.ZooKeeper.SessionTimeoutMS = 4000 // the longest the ensemble allows: outlives the election
	in := startInstance(t, cfg)
	holder, waiter := dialRaw(t, in.Addr()), newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	fences := grantSeries(t, in.Addr(), key+":series", 20)

	held := parseGrant(t, holder.do("LOCK", key, "PX", "60000", "TOKEN", "held"))
	got := waitLock(waiter, key, "PX", "60000", "WAIT", "20000")
	eventually(t, 5*time.Second, "the waiter is queued", func() bool { return waiters(t, waiter, key) == 1 })

	if _, _, err := ens.KillLeader(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the lock still held after the leader change", func() bool {
		return holder.do("GET", key) == "held"
	})
	if r := holder.do("UNLOCK", key, "held"); r != ":1" {
		t.Fatalf("UNLOCK after the leader change: %s", r)
	}
	if r := recv(t, got, 10*time.Second, "handoff after the leader change"); r.fence <= held.fence {
		t.Fatalf("waiter's fence %d after the holder's %d", r.fence, held.fence)
	}
	after := grantSeries(t, in.Addr(), key+":series", 20)
	all := append(fences, after...)
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] {
			t.Fatalf("fence %d after %d across the leader change (grant %d)", all[i], all[i-1], i)
		}
	}
}

// grantSeries takes and releases key n times and returns the fences.
func grantSeries(t *testing.T, addr, key string, n int) []int64 {
	t.Helper()
	c := dialRaw(t, addr)
	var fences []int64
	for range n {
		g := parseGrant(t, c.do("LOCK", key, "PX", "10000", "TOKEN", "series"))
		fences = append(fences, g.fence)
		if r := c.do("UNLOCK", key, "series"); r != ":1" {
			t.Fatalf("UNLOCK: %s", r)
		}
	}
	return fences
}

// parseGrant reads LOCK's reply as rendered by rawConn: "[token :fence :validity]".
func parseGrant(t *testing.T, reply string) lockReply {
	t.Helper()
	var g lockReply
	if _, err := fmt.Sscanf(reply, "[%s :%d :%d]", &g.token, &g.fence, &g.validity); err != nil {
		t.Fatalf("LOCK reply %q: %v", reply, err)
	}
	return g
}

// TestZooKeeperLockproxyKilled: lockproxy SIGKILLed while it holds a lease
// and a connection-bound lock. Another instance gets the bound lock once
// the ensemble expires the dead instance's session, not before; the lease
// lives its whole validity (it outlives the instance, as on Redis), and a
// client waiting on the other instance gets it when it ends.
func TestZooKeeperLockproxyKilled(t *testing.T) {
	zk := zktest.Start(t)
	child, addr := startZKChild(t, zk.Addr())
	c := dialRaw(t, addr)
	key := uniqueKey(t)
	lease := parseGrant(t, c.do("LOCK", key+":lease", "PX", "8000"))
	leaseEnd := time.Now().Add(time.Duration(lease.validity) * time.Millisecond)
	parseGrant(t, c.do("LOCK", key+":bound"))

	other := dialRaw(t, startInstance(t, zkConfig(zk)).Addr())
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = child.Wait()
	time.Sleep(time.Second) // half the 2 s session timeout
	for _, k := range []string{key + ":lease", key + ":bound"} {
		if r := other.do("LOCK", k, "PX", "10000"); r != "(nil)" {
			t.Fatalf("%s granted %v after the kill, before the session timeout: %s", k, time.Since(killed), r)
		}
	}
	r := other.do("LOCK", key+":bound", "PX", "10000", "WAIT", "10000")
	if !strings.HasPrefix(r, "[") {
		t.Fatalf("bound lock not granted within 10 s of the wait: %s", r)
	}
	t.Logf("bound lock granted %v after the kill (session timeout 2 s)", time.Since(killed).Round(time.Millisecond))

	r = other.do("LOCK", key+":lease", "PX", "10000", "WAIT", "9500")
	granted := time.Now()
	if !strings.HasPrefix(r, "[") {
		t.Fatalf("lease not granted within 9.5 s of the wait: %s", r)
	}
	if granted.Before(leaseEnd) {
		t.Fatalf("lease granted again %v before the end of its validity", leaseEnd.Sub(granted))
	}
	// Woken when the lease ended, not at some much later retry: within the
	// clock skew allowed (1 s by default) plus a margin for a busy machine.
	if late := granted.Sub(leaseEnd); late > 6*time.Second {
		t.Errorf("lease granted %v after its validity ended", late)
	}
	if next := parseGrant(t, r); next.fence <= lease.fence {
		t.Fatalf("fence %d after %d", next.fence, lease.fence)
	}
	t.Logf("lease granted %v after the kill, %v after its validity ended", granted.Sub(killed).Round(time.Millisecond),
		granted.Sub(leaseEnd).Round(time.Millisecond))
}

// TestZooKeeperLockproxyPaused: lockproxy SIGSTOPped while it holds a
// lease, past its session timeout, then SIGCONTed. The lease lives to its
// end and no longer: another instance refuses it until then and grants it
// after, with a higher fence; once resumed, the paused instance neither
// renews nor releases what is now another client's lock.
func TestZooKeeperLockproxyPaused(t *testing.T) {
	zk := zktest.Start(t)
	child, addr := startZKChild(t, zk.Addr())
	c := dialRaw(t, addr)
	key := uniqueKey(t)
	lease := parseGrant(t, c.do("LOCK", key, "PX", "8000"))
	leaseEnd := time.Now().Add(time.Duration(lease.validity) * time.Millisecond)

	other := dialRaw(t, startInstance(t, zkConfig(zk)).Addr())
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := child.Process.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	time.Sleep(3 * time.Second) // past the 2 s session timeout
	if r := other.do("LOCK", key, "PX", "10000"); r != "(nil)" && time.Now().Before(leaseEnd) {
		t.Fatalf("granted while the paused instance's lease lasted: %s", r)
	}
	r := other.do("LOCK", key, "PX", "20000", "WAIT", "9500")
	granted := time.Now()
	if !strings.HasPrefix(r, "[") {
		t.Fatalf("lease not granted within 9.5 s of the wait: %s", r)
	}
	next := parseGrant(t, r)
	if granted.Before(leaseEnd) || next.fence <= lease.fence {
		t.Fatalf("granted %v before the lease's end, fence %d after %d", leaseEnd.Sub(granted), next.fence, lease.fence)
	}

	resume()
	if r := c.do("RENEW", key, lease.token, "PX", "8000"); r != "(nil)" && !strings.HasPrefix(r, "-") {
		t.Fatalf("the resumed instance renewed a lease now held by another: %s", r)
	}
	if r := c.do("UNLOCK", key, lease.token); r != ":0" && !strings.HasPrefix(r, "-") {
		t.Fatalf("the resumed instance released a lease now held by another: %s", r)
	}
	if r := other.do("GET", key); r != next.token {
		t.Fatalf("GET after the paused instance resumed: %s, want %s", r, next.token)
	}
}

// startZKChild runs lockproxy over zk in a child process (this test binary,
// see TestMain) and returns it and its address.
func startZKChild(t *testing.T, zkAddr string) (*exec.Cmd, string) {
	t.Helper()
	child, line := startChild(t, "LOCKPROXY_TEST_SERVE_ZK="+zkAddr)
	addr, ok := strings.CutPrefix(line, "listening ")
	if !ok {
		t.Fatalf("child: %q", line)
	}
	return child, addr
}

// serveZK is the child process of startZKChild: lockproxy over the
// ZooKeeper at zkAddr, until killed (bounded: a minute).
func serveZK(zkAddr string) {
	cfg := instance.Default()
	cfg.Listen, cfg.Backend, cfg.MetricsListen = "127.0.0.1:0", "zookeeper", ""
	cfg.ZooKeeper.Servers, cfg.ZooKeeper.SessionTimeoutMS = []string{zkAddr}, 2000
	cfg.Locks.BoundLeaseMS = 1500
	in, err := instance.Start(cfg, zap.NewNop())
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("listening", in.Addr())
	time.Sleep(time.Minute)
	os.Exit(3)
}

// TestZooKeeperSessionExpiry: the instance holding locks is cut off from
// ZooKeeper past the session timeout. lockproxy gives up its
// connection-bound lock (counts it lost) before the ensemble can grant it
// to another client; once reconnected, its holder hears of the loss on
// its next UNLOCK. The lease outlives the session: nobody else gets it,
// and its holder renews it through the new session.
func TestZooKeeperSessionExpiry(t *testing.T) {
	zk := zktest.Start(t)
	proxy := zktest.NewProxy(t, zk.Addr())
	cfgA := zkConfig(zk)
	cfgA.ZooKeeper.Servers = []string{proxy.Addr()}
	a := startInstance(t, cfgA)
	b := dialRaw(t, startInstance(t, zkConfig(zk)).Addr())
	key := uniqueKey(t)
	holder := dialRaw(t, a.Addr())
	lease := parseGrant(t, holder.do("LOCK", key+":lease", "PX", "60000"))
	bound := parseGrant(t, holder.do("LOCK", key+":bound"))
	info := dialRaw(t, a.Addr())

	proxy.Cut()
	r := b.do("LOCK", key+":bound", "PX", "10000", "WAIT", "10000")
	if !strings.HasPrefix(r, "[") {
		t.Fatalf("the other instance never got the bound lock: %s", r)
	}
	if lost := info.do("INFO", "locks"); !strings.Contains(lost, "locks_lost:1") {
		t.Fatalf("lockproxy still vouched for the bound lock when another client got it:\n%s", lost)
	}
	// The lease is not lost: its node outlives the session.
	if r := b.do("LOCK", key+":lease", "PX", "1000"); r != "(nil)" {
		t.Fatalf("the other instance got the lease after its session expired: %s", r)
	}
	proxy.Restore()
	eventually(t, 10*time.Second, "the lease renewed through the new session", func() bool {
		return strings.HasPrefix(holder.do("RENEW", key+":lease", lease.token), ":")
	})
	if r := holder.do("UNLOCK", key+":bound", bound.token); !strings.HasPrefix(r, "-LOCKLOST") {
		t.Fatalf("UNLOCK of the lost bound lock: %s", r)
	}
	eventually(t, 10*time.Second, "a grant through the new session", func() bool {
		return strings.HasPrefix(holder.do("LOCK", key+":again", "PX", "1000"), "[")
	})
}
