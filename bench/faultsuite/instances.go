package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/proctest"
)

// Bounds of an instance's lifecycle.
const (
	readyTimeout = 30 * time.Second
)

// instance is one lockproxy subprocess, restarted on the same port.
type instance struct {
	bin  string
	args []string
	port int
	log  string
	proctest.Proc
}

// startInstance starts lockproxy on a free loopback port with the backend
// over servers, its log in dir.
func startInstance(bin, backend string, servers []string, maxLease time.Duration, dir string, i int) (*instance, error) {
	ports, err := proctest.FreePorts(1)
	if err != nil {
		return nil, err
	}
	flag := map[string]string{"redlock": "--nodes", "zookeeper": "--zk"}[backend]
	in := &instance{bin: bin, port: ports[0], log: filepath.Join(dir, "lockproxy"+strconv.Itoa(i+1)+".log")}
	in.args = []string{"--backend", backend, flag, strings.Join(servers, ","), "--listen", in.Addr()}
	if backend == "redlock" {
		conf := filepath.Join(dir, "lockproxy"+strconv.Itoa(i+1)+".toml")
		if err := os.WriteFile(conf, fmt.Appendf(nil, "[redlock]\nmax_lease_ms = %d\n", maxLease.Milliseconds()), 0o644); err != nil {
			return nil, err
		}
		in.args = append(in.args, "--config", conf)
	}
	return in, in.Restart()
}

// Addr is the instance's RESP address.
func (in *instance) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)) }

// Restart starts the instance again on its port and waits until it
// answers PING.
func (in *instance) Restart() error {
	if err := in.Start(exec.Command(in.bin, in.args...), in.log); err != nil {
		return err
	}
	if err := in.waitReady(); err != nil {
		return errors.Join(err, in.Kill())
	}
	return nil
}

func (in *instance) waitReady() error {
	c := redis.NewClient(&redis.Options{Addr: in.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		select {
		case <-in.Exited():
			return fmt.Errorf("lockproxy exited: %s\n%s", in.State(), proctest.LogTail(in.log))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lockproxy on %s not ready after %v: %w\n%s", in.Addr(), readyTimeout, err, proctest.LogTail(in.log))
		}
	}
}

// awaitGrant waits until a lock can be taken through the first instance:
// over nodes without persistence, lockproxy's restart rule counts none of
// them until they are older than the longest lease.
func (b *bed) awaitGrant(ctx context.Context, maxLease time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: b.instances[0].Addr(), MaxRetries: -1})
	defer c.Close()
	key := "fs:ready:" + newToken()
	deadline := time.Now().Add(maxLease + readyTimeout)
	for {
		err := c.SetNX(ctx, key, "x", time.Second).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no grant through %s within %v: %w", b.instances[0].Addr(), maxLease+readyTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
