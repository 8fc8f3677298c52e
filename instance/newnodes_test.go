package instance_test

import (
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// defaultConfig is a redlock config over nodes with the defaults a
// newcomer gets: the restart rule on, max_lease_ms an hour.
func defaultConfig(nodes []*redistest.Server) instance.Config {
	cfg := testConfig(nodes)
	cfg.Redlock.MaxLeaseMS = instance.Default().Redlock.MaxLeaseMS
	cfg.MetricsListen = "127.0.0.1:0"
	return cfg
}

// startErr starts an instance over cfg that must be refused, and returns
// the StartError's text.
func startErr(t *testing.T, cfg instance.Config) string {
	t.Helper()
	in, err := instance.Start(cfg, quietLogger(t))
	if err == nil {
		in.Shutdown(t.Context())
		t.Fatal("started; want a refusal")
	}
	if !errors.Is(err, instance.ErrStartup) {
		t.Fatalf("refused with %v, want a StartError (exit 2)", err)
	}
	return err.Error()
}

// TestFreshNodesRefusalSaysWhatToDo: three fresh default redis-servers
// (no fsync) without --new-nodes: every LOCK is refused for the hold-out,
// and the refusal names every node held out, the time left and the fixes;
// INFO nodes, /readyz and /metrics agree (issue 28 §1: the reply named two
// of three nodes, no time, no fix; node_up said 1 for all).
func TestFreshNodesRefusalSaysWhatToDo(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	in := startInstance(t, defaultConfig(nodes))
	c := newClient(t, in.Addr(), 2)
	err := c.Do(t.Context(), "LOCK", uniqueKey(t), "PX", 30000).Err()
	if err == nil {
		t.Fatal("LOCK granted on nodes held out")
	}
	msg := err.Error()
	for _, n := range nodes {
		if !regexp.MustCompile(regexp.QuoteMeta(n.Addr()) + `: not counted: held out for (59m\d+s|1h0m\d+s) more`).MatchString(msg) {
			t.Errorf("the refusal does not name %s with the time left:\n%s", n.Addr(), msg)
		}
	}
	for _, fix := range []string{"fix: ", "appendonly yes and appendfsync always", "--new-nodes", "redlock.max_lease_ms"} {
		if !strings.Contains(msg, fix) {
			t.Errorf("the refusal lacks %q:\n%s", fix, msg)
		}
	}
	info := c.Do(t.Context(), "INFO", "nodes").String()
	if !strings.Contains(info, "nodes_held_out:3") || !strings.Contains(info, "held_out_fix:") || strings.Count(info, ",held_out_ms=") != 3 {
		t.Errorf("INFO nodes:\n%s", info)
	}
	code, body := httpGet(t, in.MetricsAddr(), "/readyz")
	if code != 503 || !strings.Contains(body, "fix: ") || strings.Count(body, "held out for") != 3 {
		t.Errorf("/readyz: %d %q", code, body)
	}
	_, page := httpGet(t, in.MetricsAddr(), "/metrics")
	for _, n := range nodes {
		if v := metricValue(page, `lockproxy_node_held_out_seconds{node="`+n.Addr()+`"}`); v < 3500 {
			t.Errorf("held_out_seconds of %s: %v", n.Addr(), v)
		}
		if v := metricValue(page, `lockproxy_node_counted{node="`+n.Addr()+`"}`); v != 0 {
			t.Errorf("node_counted of %s: %v", n.Addr(), v)
		}
	}

	// The fix the refusal names: the same nodes, started with
	// --new-nodes, although the refused LOCK left lockproxy's keys on
	// them (the processes were found empty at first contact). The first
	// instance then counts the vetted processes too.
	cfg := defaultConfig(nodes)
	cfg.Redlock.NewNodes = true
	mustLock(t, newClient(t, startInstance(t, cfg).Addr(), 2), uniqueKey(t), "PX", 30000)
	eventually(t, 20*time.Second, "the first instance counts the vetted nodes", func() bool {
		_, ok, err := lock(t.Context(), c, uniqueKey(t), "PX", 30000)
		return ok && err == nil
	})
}

// TestNewNodesCountedAtOnce: the same fresh nodes with --new-nodes grant a
// lock at once, with a fence above any an earlier life of the nodes can
// have granted; a second instance without the flag counts the vetted
// processes at once too; the flag left set on a later start changes
// nothing while every node is the process vetted, and is refused once a
// node restarted.
func TestNewNodesCountedAtOnce(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := defaultConfig(nodes)
	cfg.Redlock.NewNodes = true
	before := time.Now().UnixMicro()
	first := startInstance(t, cfg)
	if g := mustLock(t, newClient(t, first.Addr(), 2), uniqueKey(t), "PX", 30000); g.fence <= before {
		t.Fatalf("fence %d, want above the start's time in µs %d", g.fence, before)
	}
	plain := cfg
	plain.Redlock.NewNodes = false
	mustLock(t, newClient(t, startInstance(t, plain).Addr(), 2), uniqueKey(t), "PX", 30000)
	mustLock(t, newClient(t, startInstance(t, cfg).Addr(), 2), uniqueKey(t), "PX", 30000)

	restart(t, nodes[1])
	msg := startErr(t, cfg)
	if !strings.Contains(msg, "the nodes are not new") || !strings.Contains(msg, nodes[1].Addr()) {
		t.Fatalf("--new-nodes after a node restarted: %s", msg)
	}
}

// TestNewNodesRefused: --new-nodes refuses nodes it cannot take for new,
// naming the node: one that holds lockproxy's keys, one that does not
// answer, and nodes another instance saw restart (all three restarted
// empty: only that instance's record tells them from new ones).
func TestNewNodesRefused(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := defaultConfig(nodes)
	cfg.Redlock.NewNodes = true

	nodeClient(t, nodes[2]).Set(t.Context(), "lockproxy:fence:orders:1", 7, 0)
	if msg := startErr(t, cfg); !strings.Contains(msg, nodes[2].Addr()+" holds lockproxy's keys (lockproxy:fence:orders:1)") {
		t.Fatalf("a node with lockproxy's keys: %s", msg)
	}
	nodeClient(t, nodes[2]).FlushAll(t.Context())

	down := cfg
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	down.Redlock.Nodes = []string{nodes[0].Addr(), nodes[1].Addr(), gone}
	if msg := startErr(t, down); !strings.Contains(msg, gone+" does not answer") {
		t.Fatalf("a node down: %s", msg)
	}

	watcher := startInstance(t, cfg)
	mustLock(t, newClient(t, watcher.Addr(), 2), uniqueKey(t), "PX", 30000)
	for _, n := range nodes {
		restart(t, n)
	}
	c := newClient(t, watcher.Addr(), 2)
	eventually(t, 20*time.Second, "the watching instance holds the restarted nodes out", func() bool {
		return strings.Contains(c.Do(t.Context(), "INFO", "nodes").String(), "nodes_held_out:3")
	})
	eventually(t, 20*time.Second, "its restart record on every node", func() bool {
		for _, n := range nodes {
			if nodeClient(t, n).Exists(t.Context(), "lockproxy:vetted").Val() != 1 {
				return false
			}
		}
		return true
	})
	msg := startErr(t, cfg)
	if !strings.Contains(msg, "a lockproxy instance saw it restart without fsync and holds it out") {
		t.Fatalf("nodes another instance saw restart: %s", msg)
	}
}

// TestOneServerUnderTwoNames: two addresses that reach one redis-server
// are refused at start-up, naming both (issue 28 §2: started, and granted
// a lock with one real server answering).
func TestOneServerUnderTwoNames(t *testing.T) {
	nodes := redistest.StartN(t, 2, redistest.Options{})
	_, port, _ := net.SplitHostPort(nodes[0].Addr())
	alias := "localhost:" + port
	cfg := testConfig(nodes)
	cfg.Redlock.Nodes = []string{alias, nodes[0].Addr(), nodes[1].Addr()}
	msg := startErr(t, cfg)
	if !strings.Contains(msg, "redlock.nodes: "+alias+" and "+nodes[0].Addr()+" reach the same Redis server (run_id ") {
		t.Fatalf("refusal: %s", msg)
	}
}

// TestRuleOffWarned: with redlock.max_lease_ms = 0 over nodes without
// fsync, INFO nodes and /readyz say that a restart can grant a lock twice
// (issue 30 §4: lockproxy started without a word).
func TestRuleOffWarned(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.MetricsListen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	info := newClient(t, in.Addr(), 2).Do(t.Context(), "INFO", "nodes").String()
	if !strings.Contains(info, "warning:redlock.max_lease_ms = 0 turns the restart rule off") || !strings.Contains(info, "grant a lock twice") {
		t.Errorf("INFO nodes:\n%s", info)
	}
	if code, body := httpGet(t, in.MetricsAddr(), "/readyz"); code != 200 || !strings.Contains(body, "warning: redlock.max_lease_ms = 0") {
		t.Errorf("/readyz: %d %q", code, body)
	}
}

// restart kills n and starts it again, empty (no persistence).
func restart(t *testing.T, n *redistest.Server) {
	t.Helper()
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
}

// TestNewNodesAfterRuleOff: nodes found empty at first contact may be
// taken for new later, even after refused attempts left keys — but not
// once an instance with the restart rule off (redlock.max_lease_ms = 0)
// has counted them, whatever they may have lost since.
func TestNewNodesAfterRuleOff(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	first := startInstance(t, defaultConfig(nodes))
	if err := newClient(t, first.Addr(), 2).Do(t.Context(), "LOCK", uniqueKey(t), "PX", 30000).Err(); err == nil {
		t.Fatal("granted on nodes held out")
	}
	ruleOff := testConfig(nodes)
	mustLock(t, newClient(t, startInstance(t, ruleOff).Addr(), 2), uniqueKey(t), "PX", 30000)
	cfg := defaultConfig(nodes)
	cfg.Redlock.NewNodes = true
	if msg := startErr(t, cfg); !strings.Contains(msg, "a lockproxy with redlock.max_lease_ms = 0 counted it") {
		t.Fatalf("--new-nodes after an instance with the rule off: %s", msg)
	}
}

// switchProxy forwards loopback connections to a target that a test can
// change: a DNS name or a proxy that comes to point at another server.
type switchProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.point("") })
	go p.serve()
	return p
}

func (p *switchProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }()
		go func() { io.Copy(c, up); c.Close() }()
	}
}

// point sends new connections to target and closes the open ones.
func (p *switchProxy) point(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestAliasLaterNotCountedTwice: the second node's address comes to reach
// the first node's server (its proxy is pointed there). Durable, a
// restart alone would count it at once; as the same server under a second
// name it is not counted, so with the third node down LOCK is refused
// rather than granted by one server answering twice (issue 28 §2).
func TestAliasLaterNotCountedTwice(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{AppendFsyncAlways: true})
	proxy := newSwitchProxy(t, nodes[1].Addr())
	cfg := defaultConfig(nodes)
	cfg.Redlock.Nodes[1] = proxy.ln.Addr().String()
	in := startInstance(t, cfg)
	c := newClient(t, in.Addr(), 2)
	mustLock(t, c, uniqueKey(t), "PX", 30000)

	proxy.point(nodes[0].Addr())
	eventually(t, 20*time.Second, "the second node not counted as the first's alias", func() bool {
		return strings.Contains(c.Do(t.Context(), "INFO", "nodes").String(), "node1:addr="+proxy.ln.Addr().String()+",state=not_counted,error=the same Redis server as "+nodes[0].Addr())
	})
	if err := nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	_, ok, err := lock(t.Context(), c, uniqueKey(t), "PX", 30000)
	if ok || err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("LOCK with one server under two names and the third down: granted=%v err=%v; want NOQUORUM", ok, err)
	}
}
