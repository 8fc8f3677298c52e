package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// costs are the CPU time and upstream traffic spent so far by the parts of
// the system under test. Zero where unknown.
type costs struct {
	bench    time.Duration // this process (the load generator, and lockproxy with -inprocess)
	proxy    time.Duration // the proxy subprocess: lockproxy's, or twemproxy's
	upstream time.Duration // the upstream servers (redis-servers, ZooKeeper), user+sys
	cmds     int64         // commands the redis-servers processed; requests ZooKeeper received
	reads    int64         // reads (socket read calls) the redis-servers processed
}

// server is the CPU time of the servers: the proxy (lockproxy as a
// subprocess, 0 in the bench's process; twemproxy) and its upstream servers.
func (c costs) server() time.Duration { return c.proxy + c.upstream }

func (c costs) sub(d costs) costs {
	return costs{bench: c.bench - d.bench, proxy: c.proxy - d.proxy, upstream: c.upstream - d.upstream,
		cmds: c.cmds - d.cmds, reads: c.reads - d.reads}
}

// probe reads costs from this process, the proxy subprocess of the
// implementation measured (lockproxy or twemproxy) and the upstream servers.
type probe struct {
	upstream func(ctx context.Context, c *costs) // adds the servers' figures to c
	closeFn  func() error
}

// newRedisProbe reads the redis-servers' CPU time from /proc (all of them,
// idle ones included) and their commands and reads from INFO.
func newRedisProbe(nodes cluster) *probe {
	var clients []*redis.Client
	for _, addr := range nodes.addrs() {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1}))
	}
	read := func(ctx context.Context, c *costs) {
		for _, n := range nodes {
			c.upstream += procCPU(n.PID())
		}
		for _, cl := range clients {
			info, err := cl.InfoMap(ctx, "stats").Result()
			if err != nil {
				continue
			}
			c.cmds += integer(info["Stats"]["total_commands_processed"])
			c.reads += integer(info["Stats"]["total_reads_processed"])
		}
	}
	return &probe{upstream: read, closeFn: closeClients(clients)}
}

func (p *probe) close() error { return p.closeFn() }

// read takes a snapshot, with the CPU time of the proxy process pid (0:
// none); a part it cannot read counts as zero.
func (p *probe) read(ctx context.Context, pid int) costs {
	c := costs{bench: selfCPU(), proxy: procCPU(pid)}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	p.upstream(ctx, &c)
	return c
}

// selfCPU is this process's user+sys CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU is pid's user+sys CPU time from /proc; 0 if pid is 0 or it
// cannot be read.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return parseStatCPU(string(b))
}

// parseStatCPU is utime+stime of a /proc/PID/stat line; 0 if it is not one.
func parseStatCPU(b string) time.Duration {
	// Fields after the command name, which is in parentheses: state is
	// the first, utime the 12th and stime the 13th.
	f := strings.Fields(b[strings.LastIndexByte(b, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	return time.Duration(integer(f[11])+integer(f[12])) * clockTick
}

func integer(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
