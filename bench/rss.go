package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// The RSS cases: lockproxy's resident memory with many idle client
// connections, then with many held locks.
const (
	rssIdleConns  = 10_000           // lockproxy's default max_clients
	rssHeldLocks  = 100_000          // leases, LOCK key PX rssLockTTL
	rssLockConns  = 16               // connections that send the LOCKs
	rssBatch      = 500              // LOCKs pipelined per round trip on one connection
	rssDialers    = 64               // goroutines opening the idle connections
	rssLockTTL    = time.Minute      // the leases' PX, and max_lease_ms of the case's lockproxy
	rssCaseBound  = 90 * time.Second // bound of each case
	rssSettleTime = 200 * time.Millisecond
	rssFileMargin = 200 // open files besides the idle connections, per process
)

// rssFigures are lockproxy's VmRSS in bytes: at start, with the idle
// connections open, with the locks held; an error where a case failed.
type rssFigures struct {
	desc         string
	start        int64
	idleConns    int64
	idleConnsErr error
	heldLocks    int64
	heldLocksErr error
	lockTime     time.Duration // how long taking the locks took
	nofile       string        // lockproxy's open-file limit, soft/hard
}

// runRSS measures the RSS of a fresh lockproxy subprocess over nodes in
// each case, so that neither case keeps the other's memory: with
// rssIdleConns idle connections (each answered one PING), and with
// rssHeldLocks leases taken over rssLockConns pipelined connections.
//
// The leases are a minute long (rssLockTTL), not maxLease: taking 100,000
// takes longer than 10 s at today's throughput, and the first would expire
// before the last is taken. The case's lockproxy has max_lease_ms a
// minute, so its restart rule counts the nodes once they are a minute
// old: run starts them first thing, and the other cases run meanwhile.
func runRSS(ctx context.Context, l *launcher, nodes cluster, w io.Writer) (r *rssFigures, err error) {
	r = &rssFigures{}
	err = withProxy(ctx, l, nodes, maxLease, func(px *proxy) {
		r.desc = px.desc
		r.start, _ = vmRSS(px.pid)
		r.nofile = procNofile(px.pid)
		r.idleConns, r.idleConnsErr = idleConnsRSS(ctx, px)
	})
	if err != nil {
		return nil, err
	}
	err = withProxy(ctx, l, nodes, rssLockTTL, func(px *proxy) {
		start := time.Now()
		r.heldLocks, r.heldLocksErr = heldLocksRSS(ctx, px)
		r.lockTime = time.Since(start)
	})
	if err != nil {
		return nil, err
	}
	writeRSS(w, r)
	return r, nil
}

// withProxy runs f with a lockproxy subprocess over nodes, lease its
// max_lease_ms, then stops it.
func withProxy(ctx context.Context, l *launcher, nodes cluster, lease time.Duration, f func(px *proxy)) error {
	px, err := l.startLease(ctx, suites[0], nodes.addrs(), lease)
	if err != nil {
		return err
	}
	f(px)
	return px.stop()
}

func writeRSS(w io.Writer, r *rssFigures) {
	fmt.Fprintf(w, "rss (redlock): a fresh lockproxy subprocess per case (%s), VmRSS from /proc/PID/status; "+
		"open-file limit (soft/hard) of this process %s, lockproxy's %s\n", r.desc, nofileLimit(), r.nofile)
	fmt.Fprintf(w, "%-32s %s\n", "case", "VmRSS")
	fmt.Fprintf(w, "%-32s %s\n", "started, no clients", fmtMB(r.start))
	fmt.Fprintf(w, "%-32s %s\n", fmt.Sprintf("%d idle connections", rssIdleConns), rssCell(r.idleConns, r.idleConnsErr))
	fmt.Fprintf(w, "%-32s %s (taken in %v over %d connections, %d pipelined)\n", fmt.Sprintf("%d held locks", rssHeldLocks),
		rssCell(r.heldLocks, r.heldLocksErr), r.lockTime.Round(time.Millisecond), rssLockConns, rssBatch)
}

func rssCell(b int64, err error) string {
	if err != nil {
		return "failed: " + err.Error()
	}
	return fmtMB(b)
}

// idleConnsRSS opens rssIdleConns loopback connections to lockproxy, has
// each answer one PING, reads lockproxy's RSS and closes them. Both
// processes need an open-file limit above rssIdleConns; Go raises the soft
// limit to the hard one, which the bench cannot raise.
func idleConnsRSS(ctx context.Context, px *proxy) (int64, error) {
	if err := enoughFiles(rssIdleConns+rssFileMargin, px.pid); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, rssCaseBound)
	defer cancel()
	conns := make([]net.Conn, rssIdleConns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var next atomic.Int64
	errs := make([]error, rssDialers)
	var wg sync.WaitGroup
	for d := range rssDialers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < rssIdleConns && errs[d] == nil; i = next.Add(1) - 1 {
				conns[i], errs[d] = dialPing(ctx, px.addr)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	time.Sleep(rssSettleTime) // let the server finish what each accept started
	return vmRSS(px.pid)
}

// dialPing opens a connection and waits for its answer to PING.
func dialPing(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	line, err := bufio.NewReaderSize(c, 64).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		c.Close()
		return nil, fmt.Errorf("PING: %q %v", line, err)
	}
	return c, nil
}

// heldLocksRSS takes rssHeldLocks leases, rssBatch LOCKs per round trip on
// each of rssLockConns connections, and reads lockproxy's RSS while they
// are held.
func heldLocksRSS(ctx context.Context, px *proxy) (int64, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, rssCaseBound)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: px.addr, PoolSize: rssLockConns, MaxRetries: -1,
		ReadTimeout: rssCaseBound, ContextTimeoutEnabled: true})
	defer c.Close()
	var next atomic.Int64
	errs := make([]error, rssLockConns)
	var wg sync.WaitGroup
	for g := range rssLockConns {
		wg.Go(func() {
			for from := next.Add(rssBatch) - rssBatch; from < rssHeldLocks && errs[g] == nil; from = next.Add(rssBatch) - rssBatch {
				errs[g] = lockBatch(ctx, c, from, min(from+rssBatch, rssHeldLocks))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	time.Sleep(rssSettleTime)
	rss, err := vmRSS(px.pid)
	if took := time.Since(start); err == nil && took >= rssLockTTL {
		err = fmt.Errorf("taking the locks took %v: the first had expired (PX %v)", took.Round(time.Millisecond), rssLockTTL)
	}
	return rss, err
}

// lockBatch takes the leases on keys from to to-1 in one pipeline; each must
// be granted.
func lockBatch(ctx context.Context, c *redis.Client, from, to int64) error {
	p := c.Pipeline()
	cmds := make([]*redis.Cmd, 0, to-from)
	for i := from; i < to; i++ {
		cmds = append(cmds, p.Do(ctx, "LOCK", "bench:rss:k"+strconv.FormatInt(i, 10), "PX", rssLockTTL.Milliseconds()))
	}
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("LOCK pipeline: %w", err)
	}
	for _, cmd := range cmds {
		if v, err := cmd.Slice(); err != nil || len(v) != 3 {
			return fmt.Errorf("LOCK replied %v %v", v, err)
		}
	}
	return nil
}

// vmRSS is pid's resident set size from /proc/PID/status, in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(b))
}

// parseVmRSS reads the "VmRSS:  1234 kB" line of a /proc/PID/status.
func parseVmRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				break
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS line in /proc/PID/status")
}

// nofileLimit is this process's RLIMIT_NOFILE, soft/hard. Go raises the soft
// limit to the hard one at start; lockproxy, also in Go, does the same.
func nofileLimit() string {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return "?"
	}
	return fmt.Sprintf("%d/%d", l.Cur, l.Max)
}

// procNofile is pid's "Max open files" soft/hard from /proc/PID/limits.
func procNofile(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) >= 2 {
				return f[0] + "/" + f[1]
			}
		}
	}
	return "?"
}

// enoughFiles fails unless this process's and pid's soft open-file limits
// are at least n.
func enoughFiles(n uint64, pid int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur < n {
		return fmt.Errorf("the bench's open-file limit %d is below %d (the hard limit is %d)", l.Cur, n, l.Max)
	}
	soft, _, _ := strings.Cut(procNofile(pid), "/")
	if v, err := strconv.ParseUint(soft, 10, 64); err == nil && v < n {
		return fmt.Errorf("lockproxy's open-file limit %d is below %d", v, n)
	}
	return nil
}
