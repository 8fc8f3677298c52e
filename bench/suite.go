package main

import (
	"fmt"
	"strings"
)

// suite is one backend's comparison: lockproxy on that backend against a
// client-side peer doing the same work over the same servers, in one run.
type suite struct {
	backend  string // lockproxy's --backend: "redlock" or "zookeeper"
	baseline string // the no-HA reference, if any: "redis" (one plain redis-server)
	hop      string // the baseline through a proxy, if any: "twemproxy" (what a proxy hop costs)
	peer     string // the client-side implementation: "redsync" or "zkrecipe"
	upstream string // the servers' name in the cost columns: "redis" or "zk"
}

// suites are the backends, in the order they run.
var suites = []suite{
	{backend: "redlock", baseline: "redis", hop: "twemproxy", peer: "redsync", upstream: "redis"},
	{backend: "zookeeper", peer: "zkrecipe", upstream: "zk"},
}

// allImpls are the implementations -impl takes.
var allImpls = []string{"redis", "twemproxy", "redsync", "zkrecipe", "lockproxy"}

// allBackends are the backends -backend takes.
func allBackends() []string {
	out := make([]string, len(suites))
	for i, s := range suites {
		out[i] = s.backend
	}
	return out
}

// order is the suite's implementations in its tables' order: the baseline
// and the hop if any, the peer, then lockproxy.
func (s suite) order() []string {
	var out []string
	for _, impl := range []string{s.baseline, s.hop} {
		if impl != "" {
			out = append(out, impl)
		}
	}
	return append(out, s.peer, "lockproxy")
}

// proxyArgs are lockproxy's command-line flags for the backend over servers.
func (s suite) proxyArgs(servers []string) []string {
	switch s.backend {
	case "zookeeper":
		return []string{"--backend", "zookeeper", "--zk", strings.Join(servers, ",")}
	case "embedded":
		return []string{"--backend", "embedded"}
	}
	return []string{"--backend", "redlock", "--nodes", strings.Join(servers, ",")}
}

// costHead are the head of the upstream cost columns: for redis its CPU,
// the commands it ran and its socket reads; for ZooKeeper its CPU and the
// requests it received (pings included: a few per second per session).
func (s suite) costHead() string {
	if s.backend == "zookeeper" {
		return fmt.Sprintf("%-10s %s", "zk-cpu", "zk-requests")
	}
	return fmt.Sprintf("%-10s %-11s %s", "nodes-cpu", "redis-cmds", "redis-reads")
}

// contendedHow says what each implementation does in the contended case.
func (s suite) contendedHow() string {
	lp := fmt.Sprintf("lockproxy LOCK PX %d WAIT %d", lockTTL.Milliseconds(), waitBound.Milliseconds())
	if s.backend == "zookeeper" {
		return lp + fmt.Sprintf(", zkrecipe zk.Lock on a session per client (no timeout: cut at %v by closing the session)",
			waitBound+waitMargin)
	}
	return lp + ", redsync Lock with its default retries (plain redis: no contended case)"
}
