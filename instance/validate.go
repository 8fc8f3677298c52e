package instance

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"go.uber.org/zap/zapcore"
)

// validateOps checks what an operator can get wrong before anything
// starts: addresses, node lists, which backend they imply, and the range of
// every number. Each error names the key (or flag) and the value.
func (c Config) validateOps() error {
	if err := checkListen("listen", c.Listen, false); err != nil {
		return err
	}
	if err := checkListen("metrics_listen", c.MetricsListen, true); err != nil {
		return err
	}
	if _, err := zapcore.ParseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.Password != "" && c.PasswordFile != "" {
		return errors.New("password and password_file are both set: give the password one way")
	}
	if c.Redlock.Password != "" && c.Redlock.PasswordFile != "" {
		return errors.New("redlock.password and redlock.password_file are both set: give the password one way")
	}
	if err := checkNodes("redlock.nodes", c.Redlock.Nodes); err != nil {
		return err
	}
	if err := checkNodes("zookeeper.servers", c.ZooKeeper.Servers); err != nil {
		return err
	}
	if err := c.checkBackendLists(); err != nil {
		return err
	}
	if err := c.checkTLS(); err != nil {
		return err
	}
	return c.checkRanges()
}

// checkListen accepts host:port with a port in 0..65535 (0: any free port).
func checkListen(key, addr string, optional bool) error {
	if addr == "" && optional {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port (%v)", key, addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s %q: port must be a number in 0..65535", key, addr)
	}
	return nil
}

// checkNodes parses a node list strictly: every entry is host:port with a
// port in 1..65535, and no node is listed twice (it would count twice
// toward the quorum).
func checkNodes(key string, nodes []string) error {
	seen := map[string]bool{}
	for i, n := range nodes {
		addr, err := parseNode(n)
		if err != nil {
			return fmt.Errorf("%s entry %d %q: %w", key, i+1, n, err)
		}
		if seen[addr] {
			return fmt.Errorf("%s lists %q twice: one node would count twice toward the quorum", key, n)
		}
		seen[addr] = true
	}
	return nil
}

// parseNode returns the node's address in a form where the same node
// always reads the same.
func parseNode(n string) (string, error) {
	if strings.TrimSpace(n) == "" {
		return "", errors.New("empty entry (a stray comma?)")
	}
	host, port, err := net.SplitHostPort(n)
	if err != nil {
		return "", errors.New("want host:port")
	}
	if host == "" || strings.ContainsAny(host, " \t") {
		return "", errors.New("want host:port with a host name or address")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("port %q must be a number in 1..65535", port)
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(p)), nil
}

// checkBackendLists refuses node lists that the chosen backend would
// ignore: they mean the operator wanted another backend.
func (c Config) checkBackendLists() error {
	redlock, zk := len(c.Redlock.Nodes) > 0, len(c.ZooKeeper.Servers) > 0
	switch b := c.BackendName(); {
	case c.Backend == "" && redlock && zk:
		return errors.New("both redlock.nodes (--nodes) and zookeeper.servers (--zk) are set: choose one, or set backend (--backend)")
	case b == "redlock" && zk:
		return errors.New("backend redlock but zookeeper.servers (--zk) is set: drop one of them")
	case b == "zookeeper" && redlock:
		return errors.New("backend zookeeper but redlock.nodes (--nodes) is set: drop one of them")
	case b == "embedded" && (redlock || zk):
		return errors.New("backend embedded but redlock.nodes (--nodes) or zookeeper.servers (--zk) is set: drop them, or choose that backend")
	}
	return nil
}

// maxLockDelay is the longest lock-delay in ms: a minute, as Chubby's.
const maxLockDelay = 60 * 1000

// A range is the bounds of one numeric key.
type intRange struct {
	key      string
	v        int
	min, max int
}

func (c Config) intRanges() []intRange {
	const huge = 1 << 40
	hour := 3600 * 1000
	return []intRange{
		{"redlock.node_timeout_ms", c.Redlock.NodeTimeoutMS, 0, hour},
		{"redlock.drift_fixed_ms", c.Redlock.DriftFixedMS, 0, hour},
		{"redlock.clock_skew_ms", c.Redlock.ClockSkewMS, 0, hour},
		{"redlock.pool_size", c.Redlock.PoolSize, 0, 10000},
		{"redlock.pipelines", c.Redlock.Pipelines, 1, 1000},
		{"redlock.max_batch", c.Redlock.MaxBatch, 1, 100000},
		{"redlock.max_lease_ms", c.Redlock.MaxLeaseMS, 0, 30 * 24 * hour},
		{"zookeeper.session_timeout_ms", c.ZooKeeper.SessionTimeoutMS, 1, hour},
		{"zookeeper.clock_skew_ms", c.ZooKeeper.ClockSkewMS, 1, hour},
		{"embedded.nodes", c.Embedded.Nodes, 1, 99},
		{"locks.bound_lease_ms", c.Locks.BoundLeaseMS, 1, 24 * hour},
		{"locks.renew_every_ms", c.Locks.RenewEveryMS, 0, 24 * hour},
		{"locks.op_timeout_ms", c.Locks.OpTimeoutMS, 1, hour},
		{"locks.waiter_keep_ms", c.Locks.WaiterKeepMS, 1, hour},
		{"locks.lock_delay_ms", c.Locks.LockDelayMS, 0, maxLockDelay},
		{"legacy.max_scripts", c.Legacy.MaxScripts, 1, 1 << 20},
		// At most the node client's own cap of one round trip (upstream.DefaultTimeout).
		{"legacy.script_time_limit_ms", c.Legacy.ScriptTimeLimitMS, 10, 5000},
		{"limits.max_clients", c.Limits.MaxClients, 1, 1 << 24},
		{"limits.max_key_bytes", c.Limits.MaxKeyBytes, 1, huge},
		{"limits.max_token_bytes", c.Limits.MaxTokenBytes, 1, huge},
		{"limits.max_bulk_bytes", c.Limits.MaxBulkBytes, 1, huge},
		{"limits.max_args", c.Limits.MaxArgs, 1, huge},
		{"limits.max_inline_bytes", c.Limits.MaxInlineBytes, 1, huge},
		{"limits.max_request_bytes", c.Limits.MaxRequestBytes, 1, huge},
		{"limits.max_waiters", c.Limits.MaxWaiters, 1, huge},
		{"limits.max_blocked_clients", c.Limits.MaxBlockedClients, 1, 1 << 20},
		{"limits.max_buffered_bytes", c.Limits.MaxBufferedBytes, 1, huge},
		{"limits.auth_timeout_ms", c.Limits.AuthTimeoutMS, 1, huge},
		{"limits.idle_timeout_ms", c.Limits.IdleTimeoutMS, 0, huge},
	}
}

// checkRanges range-checks every number. drift_factor is in [0, 0.5): at
// 0.5 or more the drift allowance eats half of every TTL or more, and at 1
// or more no lock is ever valid.
func (c Config) checkRanges() error {
	for _, r := range c.intRanges() {
		if r.v < r.min || r.v > r.max {
			return fmt.Errorf("%s = %d: must be in %d..%d", r.key, r.v, r.min, r.max)
		}
	}
	for i, d := range c.Locks.LockDelay {
		if d.Keys == "" {
			return fmt.Errorf("locks.lock_delay[%d].keys is empty: want a pattern such as \"orders:*\"", i)
		}
		if d.MS < 0 || d.MS > maxLockDelay {
			return fmt.Errorf("locks.lock_delay[%d].ms = %d: must be in 0..%d", i, d.MS, maxLockDelay)
		}
	}
	if f := c.Redlock.DriftFactor; !(f >= 0 && f < 0.5) {
		return fmt.Errorf("redlock.drift_factor = %v: must be at least 0 and below 0.5 (0.01 is usual)", f)
	}
	if !strings.HasPrefix(c.ZooKeeper.Root, "/") || strings.Contains(c.ZooKeeper.Root, "//") {
		return fmt.Errorf("zookeeper.root %q: want an absolute path such as /lockproxy", c.ZooKeeper.Root)
	}
	return nil
}

// Warnings are settings that work but are probably not what the operator
// wants; Start logs them.
func (c Config) Warnings() []string {
	var w []string
	var nodes []string
	switch c.BackendName() {
	case "redlock":
		nodes = c.Redlock.Nodes
	case "zookeeper":
		nodes = c.ZooKeeper.Servers
	}
	if n := len(nodes); n > 0 && n < 3 {
		w = append(w, fmt.Sprintf("%d %s node(s): a grant needs %d, so the loss of any one node stops all grants; use 3 or 5", n, c.BackendName(), n/2+1))
	} else if n > 0 && n%2 == 0 {
		w = append(w, fmt.Sprintf("%d %s nodes: an even number tolerates no more failures than %d", n, c.BackendName(), n-1))
	}
	return w
}
