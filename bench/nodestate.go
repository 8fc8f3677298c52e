package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bar 8, node state: what a node keeps once the leases of many distinct
// keys, each locked once, have ended.
const (
	// stateLease is the PX of every key's lease: short, so that the case
	// waits little for the leases to end.
	stateLease = time.Second
	// stateMaxLease is redlock.max_lease_ms of the case's lockproxy: its
	// fresh nodes count once they are this old (the restart rule), so
	// that the case waits that long only.
	stateMaxLease = 2 * time.Second
	// stateKeySlack is how many keys a node may keep beyond those it had
	// at the start: fixed bookkeeping (a layout version, a node-wide
	// counter, the state of a key still contended), never a key per
	// locked key. It does not depend on how many keys were locked.
	stateKeySlack = 16
	// stateMemSlack is how much a node's used_memory may stay above its
	// start: 512 KiB, about 5 bytes per key at 100,000 keys. Anything
	// kept per key (a Redis key costs 50 bytes and more) exceeds it, while
	// the allocator's rounding, a few fixed keys and the statistics stay
	// far below. Like the key slack, it does not grow with the keys.
	stateMemSlack = 512 << 10
	// statePoll is how often the nodes are read while the case waits for
	// them to come back within the constant.
	statePoll = 250 * time.Millisecond
	// stateReadBound bounds one reading of a node.
	stateReadBound = 30 * time.Second
)

// nodeState is one node's figures at one moment.
type nodeState struct {
	keys   int64 // DBSIZE: every key on the node, whose only user is the case's lockproxy
	lpKeys int64 // keys matching lockproxy:*
	memory int64 // used_memory of INFO memory
	err    error
}

// stateRun is one run of bar 8's case: keys distinct keys locked once each
// over three fresh nodes.
type stateRun struct {
	keys       int
	fill       fillResult
	start, end []nodeState   // by node
	back       time.Duration // from the last lease's end until every node was back within the constant; -1: it was not
	grace      time.Duration // how long the case waited for that at most
}

// growth is node i's growth from its start, in keys and in bytes of
// used_memory.
func (r stateRun) growth(i int) (keys, memory int64) {
	return r.end[i].keys - r.start[i].keys, r.end[i].memory - r.start[i].memory
}

// worst is the largest growth over the nodes, in keys, lockproxy:* keys and
// used_memory; err is the first node that could not be read.
func (r stateRun) worst() (keys, lpKeys, memory int64, err error) {
	for i := range r.end {
		if e := errors.Join(r.start[i].err, r.end[i].err); e != nil {
			return 0, 0, 0, fmt.Errorf("node %d: %w", i+1, e)
		}
		k, m := r.growth(i)
		if i == 0 {
			keys, lpKeys, memory = k, r.end[i].lpKeys-r.start[i].lpKeys, m
			continue
		}
		keys, lpKeys, memory = max(keys, k), max(lpKeys, r.end[i].lpKeys-r.start[i].lpKeys), max(memory, m)
	}
	return keys, lpKeys, memory, nil
}

// withinSlack reports whether every node is back within the constant of
// its start, in keys and in used_memory.
func withinSlack(start, end []nodeState) bool {
	if len(end) == 0 || len(start) != len(end) {
		return false
	}
	for i := range end {
		if start[i].err != nil || end[i].err != nil ||
			end[i].keys-start[i].keys > stateKeySlack || end[i].memory-start[i].memory > stateMemSlack {
			return false
		}
	}
	return true
}

// stateBars (8): one per run, met when every key was locked and every node
// came back within the constant.
func stateBars(runs []stateRun) []bar {
	if len(runs) == 0 {
		return []bar{missing("8", "node state after distinct keys locked once", "not in this run")}
	}
	var out []bar
	limit := fmt.Sprintf("+%d keys and +%d KiB used_memory a node, whatever the key count", stateKeySlack, stateMemSlack>>10)
	for _, r := range runs {
		what := fmt.Sprintf("node state after %d distinct keys locked once, the largest growth of a node once their leases ended (waited up to %v)", r.keys, r.grace)
		keys, lpKeys, memory, err := r.worst()
		if err != nil {
			out = append(out, missing("8", what, err.Error()))
			continue
		}
		lp := fmt.Sprintf("%+d keys (%+d lockproxy:*, %.3f per locked key), %+.0f KiB used_memory", keys, lpKeys,
			float64(keys)/float64(max(r.fill.locked, 1)), float64(memory)/1024)
		met := withinSlack(r.start, r.end)
		if r.fill.locked < int64(r.keys) {
			lp += fmt.Sprintf(", but only %d of %d keys locked", r.fill.locked, r.keys)
			met = false
		}
		out = append(out, bar{id: "8", what: what, lp: lp, limit: limit, measured: true, met: met})
	}
	return out
}

// runNodeState runs bar 8's case once per -state-keys count, each over three
// fresh redis-servers and a lockproxy over them, and prints the table.
func runNodeState(ctx context.Context, o options, l *launcher, dir string, w io.Writer) ([]stateRun, error) {
	var runs []stateRun
	for _, n := range o.stateKeys {
		if ctx.Err() != nil {
			break
		}
		r, err := nodeStateOnce(ctx, o, l, filepath.Join(dir, fmt.Sprintf("state-%d", n)), n)
		if err != nil {
			return runs, err
		}
		runs = append(runs, r)
	}
	writeNodeState(w, o, runs)
	return runs, nil
}

// nodeStateOnce locks n distinct keys once each with SET NX PX stateLease
// through a lockproxy over three fresh nodes, then waits until the last
// lease has ended and every node is back within the constant of where it
// started, at most o.stateGrace after that.
func nodeStateOnce(ctx context.Context, o options, l *launcher, dir string, n int) (r stateRun, err error) {
	r = stateRun{keys: n, back: -1, grace: o.stateGrace}
	nodes, err := startCluster(dir, nodeCount)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, nodes.stop()) }()
	px, err := l.startLease(ctx, suites[0], nodes.addrs(), stateMaxLease)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, px.stop()) }()
	clients := make([]*redis.Client, len(nodes))
	for i, addr := range nodes.addrs() {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
	}
	defer closeClients(clients)()
	r.start = readNodes(ctx, clients)
	r.fill = fill(ctx, px.addr, fmt.Sprintf("bench:state:n%d:k", n), n, stateLease, o.fillBound)
	r.end, r.back = awaitSlack(ctx, clients, r.start, time.Now().Add(stateLease), o.stateGrace)
	fmt.Fprintf(os.Stderr, "bench: node state %d keys: %v; back within the constant: %v\n", n, r.fill, r.back)
	return r, nil
}

// awaitSlack waits until leasesEnd, then reads the nodes every statePoll
// until they are within the constant of start, or grace has passed since
// leasesEnd, or ctx ends; it returns the last reading and how long after
// leasesEnd the nodes were back within the constant (-1: they were not).
func awaitSlack(ctx context.Context, clients []*redis.Client, start []nodeState, leasesEnd time.Time, grace time.Duration) ([]nodeState, time.Duration) {
	sleepUntil(ctx, leasesEnd)
	for {
		end := readNodes(ctx, clients)
		since := time.Since(leasesEnd)
		if withinSlack(start, end) {
			return end, since
		}
		if since >= grace || ctx.Err() != nil {
			return end, -1
		}
		sleepUntil(ctx, time.Now().Add(min(statePoll, grace-since)))
	}
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

func readNodes(ctx context.Context, clients []*redis.Client) []nodeState {
	out := make([]nodeState, len(clients))
	for i, c := range clients {
		out[i] = readNode(ctx, c)
	}
	return out
}

// readNode reads used_memory first, then DBSIZE, then counts lockproxy:*
// with SCAN: SCAN removes the expired keys it meets, which must not shrink
// the other two figures.
func readNode(ctx context.Context, c *redis.Client) nodeState {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateReadBound)
	defer cancel()
	var s nodeState
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		return nodeState{err: fmt.Errorf("INFO memory: %w", err)}
	}
	mem, ok := info["Memory"]["used_memory"]
	if !ok {
		return nodeState{err: errors.New("INFO memory has no used_memory")}
	}
	s.memory = integer(mem)
	if s.keys, err = c.DBSize(ctx).Result(); err != nil {
		return nodeState{err: fmt.Errorf("DBSIZE: %w", err)}
	}
	var cursor uint64
	for {
		var keys []string
		if keys, cursor, err = c.Scan(ctx, cursor, "lockproxy:*", 1000).Result(); err != nil {
			return nodeState{err: fmt.Errorf("SCAN: %w", err)}
		}
		s.lpKeys += int64(len(keys))
		if cursor == 0 {
			return s
		}
	}
}

// writeNodeState prints one row per node of every run, then each run's
// fill and wait.
func writeNodeState(w io.Writer, o options, runs []stateRun) {
	fmt.Fprintf(w, "node state (redlock, bar 8): per run, %d fresh redis-servers and a lockproxy over them (redlock.max_lease_ms %d); "+
		"N distinct keys locked once each with SET key token NX PX %d (%d pipelines of %d), never released; then up to %v after the last lease "+
		"ended for every node to come back within +%d keys and +%d KiB used_memory of its start\n",
		nodeCount, stateMaxLease.Milliseconds(), stateLease.Milliseconds(), fillConns, fillBatch, o.stateGrace, stateKeySlack, stateMemSlack>>10)
	fmt.Fprintf(w, "%-8s %-5s %-11s %-11s %-11s %-11s %-14s %-14s %s\n", "keys", "node", "keys start", "keys end",
		"lp:* start", "lp:* end", "used_memory", "used_memory", "growth")
	fmt.Fprintf(w, "%-8s %-5s %-11s %-11s %-11s %-11s %-14s %-14s %s\n", "", "", "", "", "", "", "start", "end", "keys, used_memory")
	for _, r := range runs {
		for i := range r.end {
			s, e := r.start[i], r.end[i]
			if err := errors.Join(s.err, e.err); err != nil {
				fmt.Fprintf(w, "%-8d %-5d failed: %v\n", r.keys, i+1, err)
				continue
			}
			k, m := r.growth(i)
			fmt.Fprintf(w, "%-8d %-5d %-11d %-11d %-11d %-11d %-14s %-14s %+d, %+.0f KiB\n", r.keys, i+1, s.keys, e.keys,
				s.lpKeys, e.lpKeys, fmtKiB(s.memory), fmtKiB(e.memory), k, float64(m)/1024)
		}
	}
	for _, r := range runs {
		back := fmt.Sprintf("not back within the constant %v after the last lease ended", r.grace)
		if r.back >= 0 {
			back = fmt.Sprintf("back within the constant %v after the last lease ended", r.back.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "%d keys: %v; %s\n", r.keys, r.fill, back)
	}
}

func fmtKiB(b int64) string { return fmt.Sprintf("%.0f KiB", float64(b)/1024) }
