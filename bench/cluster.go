package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// cluster is the redis-server processes this run started.
type cluster []*redistest.Server

// startCluster starts n redis-servers on free loopback ports, each with its
// data and log in a directory under dir.
func startCluster(dir string, n int) (cluster, error) {
	var c cluster
	for i := range n {
		s, err := startNode(filepath.Join(dir, fmt.Sprintf("redis%d", i)))
		if err != nil {
			return nil, errors.Join(err, c.stop())
		}
		c = append(c, s)
	}
	return c, nil
}

func startNode(dir string) (*redistest.Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return redistest.StartProcess(dir, redistest.Options{})
}

func (c cluster) addrs() []string {
	addrs := make([]string, len(c))
	for i, s := range c {
		addrs[i] = s.Addr()
	}
	return addrs
}

// stop kills the servers this run started, and only those.
func (c cluster) stop() error {
	var errs []error
	for _, s := range c {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}

// version is the first node's redis_version, or "?" if it cannot be read.
func (c cluster) version(ctx context.Context) string {
	if len(c) == 0 {
		return "?"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cl := redis.NewClient(&redis.Options{Addr: c[0].Addr(), MaxRetries: -1})
	defer cl.Close()
	info, err := cl.InfoMap(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	return info["Server"]["redis_version"]
}
