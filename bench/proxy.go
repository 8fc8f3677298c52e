package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/proctest"
)

// Bounds of the lockproxy's lifecycle.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
)

// proxy is a running lockproxy.
type proxy struct {
	addr string
	desc string // how it runs, for the header
	pid  int    // the subprocess's pid; 0 in-process
	stop func() error
}

// launcher starts lockproxy, in this process or as a subprocess of a
// binary it builds into dir once.
type launcher struct {
	inprocess bool
	procs     int // the subprocess's GOMAXPROCS; 0: lockproxy's choice
	dir       string
	bin       string // built on the first start of a subprocess
}

// maxLease is the redlock.max_lease_ms the bench gives lockproxy: the
// longest lease it takes, a connection-bound lock's (locks.bound_lease_ms'
// default). The bench's nodes run without persistence, so lockproxy's
// restart rule counts a node only once it is this old; start waits for it.
const maxLease = 10 * time.Second

// start runs lockproxy with the backend of s over servers, and waits until
// it grants.
func (l *launcher) start(ctx context.Context, s suite, servers []string) (px *proxy, err error) {
	return l.startLease(ctx, s, servers, maxLease)
}

// startLease is start with lease as redlock.max_lease_ms.
func (l *launcher) startLease(ctx context.Context, s suite, servers []string, lease time.Duration) (px *proxy, err error) {
	if l.inprocess {
		px, err = startInProcess(s, servers, lease)
	} else {
		px, err = l.startSubprocess(ctx, s, servers, lease)
	}
	if err != nil || s.backend == "zookeeper" {
		return px, err
	}
	if err := awaitGrant(ctx, px.addr, lease); err != nil {
		return nil, errors.Join(err, px.stop())
	}
	return px, nil
}

func (l *launcher) startSubprocess(ctx context.Context, s suite, servers []string, lease time.Duration) (*proxy, error) {
	if l.bin == "" {
		bin, err := proctest.BuildLockproxy(ctx, l.dir)
		if err != nil {
			return nil, err
		}
		l.bin = bin
	}
	args := s.proxyArgs(servers)
	if s.backend == "redlock" {
		conf := filepath.Join(l.dir, "lockproxy.toml")
		toml := fmt.Appendf(nil, "[redlock]\nmax_lease_ms = %d\n[locks]\nbound_lease_ms = %d\n", lease.Milliseconds(), boundLease(lease).Milliseconds())
		if err := os.WriteFile(conf, toml, 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--config", conf)
	}
	return startSubprocess(ctx, l.bin, args, l.procs)
}

// boundLease is locks.bound_lease_ms for redlock.max_lease_ms lease: its
// default, maxLease, or lease if that is shorter (it may not exceed it).
func boundLease(lease time.Duration) time.Duration { return min(lease, maxLease) }

// awaitGrant waits until lockproxy at addr grants a lock: with redlock,
// until its nodes are older than lease, its max_lease_ms.
func awaitGrant(ctx context.Context, addr string, lease time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, lease+readyTimeout)
	defer cancel()
	key := fmt.Sprintf("bench:ready:%d", time.Now().UnixNano())
	err := retryUntil(ctx, 100*time.Millisecond, nil, func() error { return c.SetNX(ctx, key, "x", time.Second).Err() })
	if err != nil {
		return fmt.Errorf("lockproxy at %s granted nothing within %v: %w", addr, lease+readyTimeout, err)
	}
	return nil
}

// retryUntil calls try every interval until it succeeds, ctx ends or
// exited (nil: never) is closed; it returns try's last error then.
func retryUntil(ctx context.Context, every time.Duration, exited <-chan struct{}, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.Join(errors.New("exited"), err)
		case <-ctx.Done():
			return err
		case <-time.After(every):
		}
	}
}

func startInProcess(s suite, servers []string, lease time.Duration) (*proxy, error) {
	cfg := instance.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Backend = s.backend
	switch s.backend {
	case "zookeeper":
		cfg.ZooKeeper.Servers = servers
	case "redlock":
		cfg.Redlock.Nodes = servers
		cfg.Redlock.MaxLeaseMS = int(lease.Milliseconds())
		cfg.Locks.BoundLeaseMS = int(boundLease(lease).Milliseconds())
	}
	in, err := instance.Start(cfg, zap.NewNop())
	if err != nil {
		return nil, fmt.Errorf("start lockproxy in-process: %w", err)
	}
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		return in.Shutdown(ctx)
	}
	return &proxy{addr: in.Addr(), desc: "in-process", stop: stop}, nil
}

// subprocess is a lockproxy process this run started.
type subprocess struct {
	cmd    *exec.Cmd
	ready  chan string   // the listen address, once
	exited chan struct{} // closed once the process has exited
}

// startSubprocess runs bin with args, which name the backend and its
// servers, and waits until it serves. A positive procs is its GOMAXPROCS;
// 0 leaves Go's default (one per CPU, or the GOMAXPROCS environment).
func startSubprocess(ctx context.Context, bin string, args []string, procs int) (*proxy, error) {
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	if procs > 0 {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(procs))
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start lockproxy: %w", err)
	}
	p := &subprocess{cmd: cmd, ready: make(chan string, 1), exited: make(chan struct{})}
	go p.watch(stderr)
	addr, err := p.waitReady(ctx)
	if err != nil {
		return nil, errors.Join(err, p.stop())
	}
	pid := cmd.Process.Pid
	threads := "GOMAXPROCS: Go's default"
	if procs > 0 {
		threads = fmt.Sprintf("GOMAXPROCS=%d", procs)
	}
	desc := fmt.Sprintf("subprocess pid %d, %s", pid, threads)
	return &proxy{addr: addr, desc: desc, pid: pid, stop: p.stop}, nil
}

// watch reads the process's log until it exits: it reports the listen
// address and passes on every line that is not info-level. Then it reaps
// the process (Wait must follow the last read of the pipe).
func (p *subprocess) watch(stderr io.Reader) {
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		p.line(sc.Bytes())
	}
	_ = p.cmd.Wait() // a process stopped by a signal exits with an error
	close(p.exited)
}

// logLine is the part of lockproxy's JSON log lines the bench reads.
type logLine struct {
	Level  string `json:"level"`
	Msg    string `json:"msg"`
	Listen string `json:"listen"`
}

func (p *subprocess) line(b []byte) {
	var l logLine
	if json.Unmarshal(b, &l) != nil || l.Level != "info" {
		fmt.Fprintf(os.Stderr, "lockproxy: %s\n", b)
	}
	if l.Msg == "lockproxy serving" && l.Listen != "" {
		select {
		case p.ready <- l.Listen:
		default:
		}
	}
}

func (p *subprocess) waitReady(ctx context.Context) (string, error) {
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case addr := <-p.ready:
		return addr, nil
	case <-p.exited:
		return "", fmt.Errorf("lockproxy exited before serving: %s", p.cmd.ProcessState)
	case <-timer.C:
		return "", fmt.Errorf("lockproxy not serving after %v", readyTimeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop sends SIGTERM, and SIGKILL if the process has not exited within
// stopTimeout; it waits for the exit.
func (p *subprocess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only if it exited already
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	timer.Reset(stopTimeout)
	select {
	case <-p.exited:
	case <-timer.C:
	}
	return fmt.Errorf("lockproxy did not stop within %v; sent SIGKILL", stopTimeout)
}
