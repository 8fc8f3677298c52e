package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/lockproxy/lockproxy/internal/clockshim"
	"github.com/lockproxy/lockproxy/internal/netfault"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// node is one upstream server process: a redis-server or a ZooKeeper
// server, stopped, paused and resumed by the PID this program started.
type node interface {
	Addr() string
	Kill() error
	Restart() error
	Pause() error
	Resume() error
	Stop() error
	Dir() string
}

// upstream is the backend's servers and, per lockproxy instance, a
// fault-injecting link to each of them: links[i][n] carries instance i's
// traffic to node n.
type upstream struct {
	backend string
	nodes   []node
	links   [][]*netfault.Proxy
	wipe    func(node) error // deletes a stopped node's data
	stop    func() error
	clocks  []*clockshim.Clock // each node's wall clock, when under the shim (clock.go)
}

// startUpstream starts the backend's servers under dir and the links of
// each of the instances to them.
func startUpstream(backend string, n, instances int, durable, shim bool, dir string) (*upstream, error) {
	var u *upstream
	var err error
	switch backend {
	case "redlock":
		u, err = startRedis(n, durable, shim, dir)
	case "zookeeper":
		u, err = startZooKeeper(dir, shim)
	default:
		return nil, fmt.Errorf("unknown backend %q (redlock or zookeeper)", backend)
	}
	if err != nil {
		return nil, err
	}
	for range instances {
		row, err := u.linkAll()
		u.links = append(u.links, row)
		if err != nil {
			return nil, errors.Join(err, u.close())
		}
	}
	return u, nil
}

// startRedis starts n redis-servers, with appendfsync always when durable,
// so that a killed node restarts with every acknowledged write (and
// lockproxy, which verifies it, counts it again at once); without, so that
// a node restarted empty falls under lockproxy's restart rule.
func startRedis(n int, durable, shim bool, dir string) (*upstream, error) {
	u := &upstream{backend: "redlock", wipe: wipeRedis}
	u.stop = u.stopNodes
	if shim {
		var err error
		if u.clocks, err = startClocks(n, dir); err != nil {
			return nil, err
		}
	}
	for i := range n {
		d := filepath.Join(dir, "redis"+strconv.Itoa(i+1))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, errors.Join(err, u.stop())
		}
		opts := redistest.Options{AppendFsyncAlways: durable}
		if shim {
			opts.Env = u.clocks[i].Env()
		}
		s, err := redistest.StartProcess(d, opts)
		if err != nil {
			return nil, errors.Join(err, u.stop())
		}
		u.nodes = append(u.nodes, s)
	}
	return u, nil
}

// wipeRedis deletes a redis-server's append-only files and snapshot.
func wipeRedis(n node) error {
	return errors.Join(os.RemoveAll(filepath.Join(n.Dir(), "appendonlydir")), os.RemoveAll(filepath.Join(n.Dir(), "dump.rdb")))
}

// startZooKeeper starts a 3-server ensemble, under the clock shim when
// shim (the JVM reads its wall clock through libc).
func startZooKeeper(dir string, shim bool) (*upstream, error) {
	var clocks []*clockshim.Clock
	var env func(i int) []string
	if shim {
		var err error
		if clocks, err = startClocks(3, dir); err != nil {
			return nil, err
		}
		env = func(i int) []string { return clocks[i].Env() }
	}
	e, err := zktest.StartEnsembleProcessEnv(dir, 3, env)
	if err != nil {
		return nil, err
	}
	u := &upstream{backend: "zookeeper", wipe: wipeZooKeeper, stop: e.Stop, clocks: clocks}
	for _, s := range e.Servers() {
		u.nodes = append(u.nodes, s)
	}
	return u, nil
}

// wipeZooKeeper deletes a ZooKeeper server's snapshots and transaction
// log, keeping its myid.
func wipeZooKeeper(n node) error {
	return os.RemoveAll(filepath.Join(n.Dir(), "data", "version-2"))
}

func (u *upstream) stopNodes() error {
	var errs []error
	for _, n := range u.nodes {
		errs = append(errs, n.Stop())
	}
	return errors.Join(errs...)
}

// linkAll starts one link to each node.
func (u *upstream) linkAll() ([]*netfault.Proxy, error) {
	var row []*netfault.Proxy
	for _, n := range u.nodes {
		l, err := netfault.Listen(n.Addr())
		if err != nil {
			return row, err
		}
		row = append(row, l)
	}
	return row, nil
}

// addrs are the link addresses instance i is given.
func (u *upstream) addrs(i int) []string {
	var a []string
	for _, l := range u.links[i] {
		a = append(a, l.Addr())
	}
	return a
}

// nodeLinks are every instance's links to node n.
func (u *upstream) nodeLinks(n int) []*netfault.Proxy {
	var ls []*netfault.Proxy
	for _, row := range u.links {
		ls = append(ls, row[n])
	}
	return ls
}

// close stops the links and the servers this program started.
func (u *upstream) close() error {
	var errs []error
	for _, row := range u.links {
		for _, l := range row {
			errs = append(errs, l.Close())
		}
	}
	return errors.Join(append(errs, u.stop())...)
}
