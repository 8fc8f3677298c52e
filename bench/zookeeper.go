package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/internal/zktest"
)

// zkSessionTimeout is the session timeout of the peer's sessions:
// lockproxy's default (zookeeper.session_timeout_ms).
const zkSessionTimeout = 10 * time.Second

// zkRecipeRoot is the parent of the recipe's lock nodes, one per key (a
// zk.Lock's path must serve that lock only); lockproxy uses /lockproxy.
const zkRecipeRoot = "/bench-zkrecipe"

// zkCloseTimeout bounds the wait, at the end, for recipe cycles left behind
// by their timeout: closing the session fails or wakes every one of them.
const zkCloseTimeout = 5 * time.Second

// zkContainerCheck is how often the server removes empty container nodes:
// ZooKeeper's default. zktest's 0.2 s lets tests see empty key nodes go;
// here it would cost lockproxy, whose key nodes are containers, a re-create
// (two more requests) for nearly every idle key every 0.2 s, a price no
// production server charges. The recipe's parents are persistent.
const zkContainerCheck = time.Minute

var zkACL = zk.WorldACL(zk.PermAll)

// zkLog passes go-zookeeper's messages on to stderr; WithLogInfo(false)
// leaves the unexpected ones only.
type zkLog struct{}

func (zkLog) Printf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "zkrecipe: "+format+"\n", args...)
}

// zkConnect opens a session with the server at addr and waits until it is
// established.
func zkConnect(addr string) (*zk.Conn, error) {
	conn, _, err := zk.Connect([]string{addr}, zkSessionTimeout, zk.WithLogInfo(false), zk.WithLogger(zkLog{}))
	if err != nil {
		return nil, fmt.Errorf("zkrecipe: connect %s: %w", addr, err)
	}
	deadline := time.Now().Add(readyTimeout)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			conn.Close()
			return nil, fmt.Errorf("zkrecipe: no ZooKeeper session with %s after %v", addr, readyTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return conn, nil
}

// openZooKeeper starts one standalone ZooKeeper server in dir, then the
// implementations of s over it.
func openZooKeeper(ctx context.Context, o options, s suite, l *launcher, dir string, b *bed) error {
	zktest.ContainerCheck = zkContainerCheck
	zs, err := zktest.StartProcess(dir)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, zs.Stop)
	addr := zs.Addr()
	others := map[string]func(int) (*target, error){s.peer: func(int) (*target, error) { return newZKRecipeTarget(addr) }}
	targets, px, err := openTargets(ctx, o, s, l, []string{addr}, others)
	if err != nil {
		return err
	}
	b.targets = targets
	b.closers = append(b.closers, func() error { return closeTargets(targets, px) })
	b.probe = newZKProbe(zs)
	b.closers = append(b.closers, b.probe.close)
	srvr, _ := zktest.FourLetter(addr, "srvr")
	b.setup = fmt.Sprintf("setup (zookeeper): ZooKeeper %s standalone on loopback, pid %d, empty containers removed every %v; "+
		"lockproxy %s, one session; zkrecipe: go-zookeeper zk.Lock, one session for all workers, one per contended client; %s",
		zkVersion(srvr), zs.PID(), zkContainerCheck, proxyDesc(px), perCase(o))
	return nil
}

// zkVersion is the version in the reply to "srvr" ("Zookeeper version:
// 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on ..."), or "?".
func zkVersion(srvr string) string {
	for line := range strings.Lines(srvr) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Zookeeper version: "); ok {
			v, _, _ = strings.Cut(v, ",")
			v, _, _ = strings.Cut(v, "-")
			return v
		}
	}
	return "?"
}

// newZKProbe reads the server's CPU time from /proc (it is a JVM, which
// reports none itself) and the requests it received from "mntr".
func newZKProbe(zs *zktest.Server) *probe {
	read := func(_ context.Context, c *costs) {
		c.upstream += procCPU(zs.PID())
		if m, err := zktest.Mntr(zs.Addr()); err == nil {
			c.cmds += integer(m["zk_packets_received"])
		}
	}
	return &probe{upstream: read, closeFn: func() error { return nil }}
}

// zkRecipe is go-zookeeper's lock recipe, the peer of lockproxy's zookeeper
// backend: Lock creates an ephemeral sequential node under the key's node,
// lists the children and, unless it is the lowest, watches the one just
// before it; Unlock deletes the node. The uncontended workers share one
// session, as the goroutines of one program would.
type zkRecipe struct {
	addr   string
	conn   *zk.Conn
	cycles sync.WaitGroup // every cycle's goroutine
}

func newZKRecipeTarget(addr string) (*target, error) {
	conn, err := zkConnect(addr)
	if err != nil {
		return nil, err
	}
	r := &zkRecipe{addr: addr, conn: conn}
	contend := func(key string) contender { return newZKRecipeContender(addr, key) }
	return &target{name: "zkrecipe", cycle: r.cycle, contend: contend, close: r.close}, nil
}

// cycle locks and unlocks key's node. The recipe takes no context, so the
// cycle runs on a goroutine of its own and is given up when ctx ends; it
// then finishes by itself, or when close ends the session. A worker gives
// a key that failed a new name, so a node left behind blocks no later
// cycle.
func (r *zkRecipe) cycle(ctx context.Context, key string) (time.Duration, error) {
	var acquire time.Duration
	err := runBounded(ctx, &r.cycles, func() (err error) {
		acquire, err = recipeCycle(r.conn, zkRecipeRoot+"/"+key)
		return err
	})
	if err != nil {
		return 0, err
	}
	return acquire, nil
}

func recipeCycle(conn *zk.Conn, path string) (acquire time.Duration, err error) {
	start := time.Now()
	l := zk.NewLock(conn, path, zkACL)
	if err := l.Lock(); err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	acquire = time.Since(start)
	if err := l.Unlock(); err != nil {
		return 0, fmt.Errorf("unlock: %w", err)
	}
	return acquire, nil
}

// runBounded runs f on a goroutine counted in wg and returns its error, or
// ctx's once ctx ends first; f is then left to finish.
func runBounded(ctx context.Context, wg *sync.WaitGroup, f func() error) error {
	done := make(chan error, 1)
	wg.Go(func() { done <- f() })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("given up: %w", ctx.Err())
	}
}

// close ends the shared session, which fails or wakes any cycle left
// behind, and waits for them.
func (r *zkRecipe) close() error {
	r.conn.Close()
	return waitGroupWithin(&r.cycles, zkCloseTimeout)
}

// waitGroupWithin waits for wg, at most d.
func waitGroupWithin(wg *sync.WaitGroup, d time.Duration) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("zkrecipe: cycles still running %v after the session was closed", d)
	}
}

// zkRecipeContender is one client of the contended case with a session of
// its own. Its lock node's sequence number is its place in line. A lock or
// an unlock still under way when its ctx ends is cut short by closing the
// session, which deletes the client's node, so that no other client waits
// behind it; the next lock opens a new session. The same goes after any
// failure.
type zkRecipeContender struct {
	addr string
	path string
	conn *zk.Conn // nil after a bound closed it
	l    *zk.Lock
	err  error // the failure to connect, if any
}

func newZKRecipeContender(addr, key string) *zkRecipeContender {
	c := &zkRecipeContender{addr: addr, path: zkRecipeRoot + "/" + key}
	c.conn, c.err = zkConnect(addr)
	return c
}

func (c *zkRecipeContender) lock(ctx context.Context) error {
	if c.conn == nil && c.err == nil {
		c.conn, c.err = zkConnect(c.addr)
	}
	if c.err != nil {
		return c.err
	}
	c.l = zk.NewLock(c.conn, c.path, zkACL)
	if err := c.bounded(ctx, c.l.Lock); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	return nil
}

func (c *zkRecipeContender) unlock(ctx context.Context) error {
	if c.conn == nil {
		return errors.New("unlock: the session was closed")
	}
	if err := c.bounded(ctx, c.l.Unlock); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// bounded runs f, closing the session if ctx ends first. After any failure
// the session is closed, which deletes a node the attempt left behind.
func (c *zkRecipeContender) bounded(ctx context.Context, f func() error) error {
	stop := context.AfterFunc(ctx, c.conn.Close)
	err := f()
	if !stop() { // ctx ended: the session is closed, or closing
		err = sessionClosed(ctx.Err(), err)
	}
	if err != nil {
		c.conn.Close()
		c.conn = nil
	}
	return err
}

// sessionClosed is the error of a call cut short by closing the session
// when ctx ended with cause; err is what the call itself returned.
func sessionClosed(cause, err error) error {
	if err == nil {
		return fmt.Errorf("session closed: %w", cause)
	}
	return fmt.Errorf("session closed: %w (%w)", cause, err)
}

func (c *zkRecipeContender) close() error {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	return nil
}
