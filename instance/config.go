package instance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/pubsub"
	"github.com/lockproxy/lockproxy/resp"
)

// Config is lockproxy's whole configuration. config.example.toml documents
// every key; the toml tags are the keys' names.
type Config struct {
	// Listen is the RESP listener's address.
	Listen string `toml:"listen"`
	// Backend is "redlock", "zookeeper" or "embedded"; empty means embedded.
	Backend string `toml:"backend"`
	// Password, when set, must be given with AUTH or HELLO AUTH.
	Password string `toml:"password"`
	// PasswordFile names a file holding the password (one trailing newline
	// is dropped); it is read at start-up and on SIGHUP.
	PasswordFile string `toml:"password_file"`
	// ProtectedMode refuses clients from other hosts while no password is
	// set, as Redis's protected-mode does (default true).
	ProtectedMode bool `toml:"protected_mode"`
	// MetricsListen is the HTTP address of /metrics, /healthz and /readyz;
	// empty disables it.
	MetricsListen string `toml:"metrics_listen"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`

	Redlock     RedlockConfig     `toml:"redlock"`
	ZooKeeper   ZooKeeperConfig   `toml:"zookeeper"`
	Embedded    EmbeddedConfig    `toml:"embedded"`
	Locks       LocksConfig       `toml:"locks"`
	Legacy      LegacyConfig      `toml:"legacy"`
	Limits      LimitsConfig      `toml:"limits"`
	TLS         TLSConfig         `toml:"tls"`
	Passthrough PassthroughConfig `toml:"passthrough"`
	// Users are ACL-style users besides the default one (password).
	Users []UserConfig `toml:"users"`
}

// UserConfig is one [[users]] entry: AUTH name password.
type UserConfig struct {
	Name         string   `toml:"name"`
	Password     string   `toml:"password"`
	PasswordFile string   `toml:"password_file"` // re-read on SIGHUP
	Keys         []string `toml:"keys"`          // glob patterns (* and ?) of the keys it may lock
	// Commands is "native", "legacy" or "all" (the default): the command
	// families the user may run.
	Commands string `toml:"commands"`
}

// LegacyConfig tunes the legacy commands (SET NX, DEL, EVAL, ...).
type LegacyConfig struct {
	// DelFromAnyConnection lets DEL, UNLINK, EXPIRE and PEXPIRE act on a lock
	// whichever connection took it, as Redis does; off, only the connection
	// that took it may.
	DelFromAnyConnection bool `toml:"del_from_any_connection"`
	MaxScripts           int  `toml:"max_scripts"` // scripts the SCRIPT cache keeps
	// ScriptTimeLimitMS bounds a script outside the catalog run on the
	// nodes; a node still running it then is sent SCRIPT KILL.
	ScriptTimeLimitMS int `toml:"script_time_limit_ms"`
}

// RedlockConfig configures the redlock backend.
type RedlockConfig struct {
	Nodes         []string `toml:"nodes"`           // host:port of each independent Redis node
	Password      string   `toml:"password"`        // the nodes' AUTH password
	PasswordFile  string   `toml:"password_file"`   // file holding the nodes' AUTH password
	NodeTimeoutMS int      `toml:"node_timeout_ms"` // bound of one call to one node; 0: TTL/20 within [250ms, 2s]
	DriftFactor   float64  `toml:"drift_factor"`    // clock drift per unit of TTL
	DriftFixedMS  int      `toml:"drift_fixed_ms"`  // added to the drift allowance
	ClockSkewMS   int      `toml:"clock_skew_ms"`   // a node's clock this far from ours at first contact, or after a long silence, jumped; 0: not checked
	KeyPrefix     string   `toml:"key_prefix"`      // prefix of lockproxy's keys on the nodes
	PoolSize      int      `toml:"pool_size"`       // connections per node for status reads and surveys; 0 = pipelines
	Pipelines     int      `toml:"pipelines"`       // batches awaiting replies at once on a node's script connection
	MaxBatch      int      `toml:"max_batch"`       // most scripts in one batch
	// MaxLeaseMS is the longest lease any lockproxy sharing the nodes grants
	// or renews (longer TTLs are refused), and so how long a node that
	// restarted without verified fsync is not counted; 0 turns the restart
	// rule off (quorum.Config.MaxLease).
	MaxLeaseMS int `toml:"max_lease_ms"`
	// NewNodes says the nodes are new (etcd's initial-cluster-state new):
	// at start-up every node must answer, be a distinct server and hold
	// none of lockproxy's keys — or, on a later start, every node must
	// be the very process an instance already vetted — else the start is
	// refused; the nodes are then counted at once instead of being held
	// out for max_lease_ms (see instance/newnodes.go).
	NewNodes bool    `toml:"new_nodes"`
	TLS      NodeTLS `toml:"tls"` // TLS to the nodes
}

// ZooKeeperConfig configures the zookeeper backend.
type ZooKeeperConfig struct {
	Servers          []string `toml:"servers"`            // host:port of each ensemble member
	Root             string   `toml:"root"`               // parent of every lock's node; created if missing
	SessionTimeoutMS int      `toml:"session_timeout_ms"` // how long the ensemble keeps lockproxy's connection-bound locks after it vanishes
	// ClockSkewMS is ignored: leases no longer depend on the instances'
	// wall clocks agreeing (issue 30). Still accepted, so that existing
	// config files load.
	ClockSkewMS int `toml:"clock_skew_ms"`
	// ACLDigest, "user:password", makes lock nodes readable and writable
	// only by that identity (ZooKeeper digest ACL); empty: open to all.
	ACLDigest string  `toml:"acl_digest"`
	TLS       NodeTLS `toml:"tls"` // TLS to the servers (their secureClientPort)
}

// EmbeddedConfig configures the embedded development backend.
type EmbeddedConfig struct {
	Nodes int `toml:"nodes"` // in-process Redis-compatible nodes
}

// LocksConfig tunes locks.
type LocksConfig struct {
	BoundLeaseMS int `toml:"bound_lease_ms"` // upstream lease of a connection-bound lock
	RenewEveryMS int `toml:"renew_every_ms"` // watchdog period; 0 = bound_lease_ms/3
	OpTimeoutMS  int `toml:"op_timeout_ms"`  // cap of a renewal or a release on disconnect
	WaiterKeepMS int `toml:"waiter_keep_ms"` // life of a waiter's place in a key's line, refreshed by its tries
	// LockDelayMS: a connection-bound lock whose connection closes without
	// releasing it is not granted again for this long; 0 = off.
	LockDelayMS int `toml:"lock_delay_ms"`
	// LockDelay sets the lock-delay of the keys matching a pattern; the
	// first match wins, lock_delay_ms holds for the rest.
	LockDelay []LockDelayConfig `toml:"lock_delay"`
}

// LockDelayConfig is the lock-delay of the keys that match a pattern.
type LockDelayConfig struct {
	Keys string `toml:"keys"` // a glob: * any run of characters, ? one, \ escapes the next
	MS   int    `toml:"ms"`   // 0 = off for these keys
}

// LimitsConfig bounds what clients may send.
type LimitsConfig struct {
	MaxClients      int `toml:"max_clients"`
	MaxKeyBytes     int `toml:"max_key_bytes"`
	MaxTokenBytes   int `toml:"max_token_bytes"`
	MaxBulkBytes    int `toml:"max_bulk_bytes"`
	MaxArgs         int `toml:"max_args"`
	MaxInlineBytes  int `toml:"max_inline_bytes"`
	MaxRequestBytes int `toml:"max_request_bytes"`
	MaxWaiters      int `toml:"max_waiters"`
	// MaxBlockedClients bounds the clients blocked in BLPOP/BRPOP at once;
	// each holds one connection to every node.
	MaxBlockedClients int `toml:"max_blocked_clients"`
	// MaxBufferedBytes caps the bytes buffered for all clients' incomplete requests together.
	MaxBufferedBytes int `toml:"max_buffered_bytes"`
	// AuthTimeoutMS: with a password set, a connection not authenticated by then is closed.
	AuthTimeoutMS int `toml:"auth_timeout_ms"`
	// IdleTimeoutMS: a connection silent that long, and not blocked in LOCK ... WAIT, is closed; 0: never.
	IdleTimeoutMS int `toml:"idle_timeout_ms"`
}

// Default returns the configuration lockproxy runs with when nothing is
// configured: the embedded backend on 127.0.0.1:6380.
func Default() Config {
	return Config{
		Listen:        "127.0.0.1:6380",
		LogLevel:      "info",
		ProtectedMode: true,
		Redlock: RedlockConfig{
			NodeTimeoutMS: 0, // automatic: a share of each lock's TTL
			DriftFactor:   0.01,
			DriftFixedMS:  2,
			ClockSkewMS:   1000,
			KeyPrefix:     "lockproxy:",
			Pipelines:     1,
			MaxBatch:      128,
			MaxLeaseMS:    3600 * 1000,
		},
		ZooKeeper: ZooKeeperConfig{Root: "/lockproxy", SessionTimeoutMS: 10000, ClockSkewMS: 1000},
		Embedded:  EmbeddedConfig{Nodes: 3},
		Users:     []UserConfig{},
		Locks:     LocksConfig{BoundLeaseMS: 10000, OpTimeoutMS: 5000, WaiterKeepMS: 2000, LockDelay: []LockDelayConfig{}},
		Legacy:    LegacyConfig{DelFromAnyConnection: true, MaxScripts: 1000, ScriptTimeLimitMS: 5000},
		Limits: LimitsConfig{
			MaxClients:      10000,
			MaxKeyBytes:     1024,
			MaxTokenBytes:   256,
			MaxBulkBytes:    1 << 20,
			MaxArgs:         4096,
			MaxInlineBytes:  64 << 10,
			MaxRequestBytes: 4 << 20,
			MaxWaiters:      10000,

			MaxBufferedBytes: 256 << 20,
			AuthTimeoutMS:    10000,

			MaxBlockedClients: 1000,
		},
		Passthrough: PassthroughConfig{TimeoutMS: 5000, LockKeys: []string{}},
	}
}

// BackendName is the backend in use: Backend, or "embedded" when empty.
func (c Config) BackendName() string {
	if c.Backend == "" {
		return "embedded"
	}
	return c.Backend
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if err := c.validateOps(); err != nil {
		return err
	}
	if err := c.Passthrough.validate(); err != nil {
		return err
	}
	if err := c.validateUsers(); err != nil {
		return err
	}
	switch c.BackendName() {
	case "embedded":
		if c.Embedded.Nodes < 1 {
			return fmt.Errorf("embedded.nodes must be at least 1, not %d", c.Embedded.Nodes)
		}
	case "redlock":
		if len(c.Redlock.Nodes) == 0 {
			return fmt.Errorf("backend redlock needs redlock.nodes (or --nodes)")
		}
		if m := c.Redlock.MaxLeaseMS; m > 0 && c.Locks.BoundLeaseMS > m {
			return fmt.Errorf("locks.bound_lease_ms (%d) must not exceed redlock.max_lease_ms (%d)", c.Locks.BoundLeaseMS, m)
		}
		// A key of SELECTed database N is stored under lockproxy:db<N>:
		// (resp.DBKey), and a script may name any key outside
		// key_prefix: a key_prefix inside a database's space would let
		// that database's scripts write the bookkeeping (a lock's meta,
		// the node's fencing counter) under the names they chose.
		if p := c.Redlock.KeyPrefix; p != "" && resp.ClientKey(p+"k") != p+"k" {
			return fmt.Errorf("redlock.key_prefix %q lies among the keys of a SELECTed database (lockproxy:db<N>:...): choose another", p)
		}
	case "zookeeper":
		if len(c.ZooKeeper.Servers) == 0 {
			return fmt.Errorf("backend zookeeper needs zookeeper.servers (or --zk)")
		}
		if d := c.ZooKeeper.ACLDigest; d != "" && !strings.Contains(d, ":") {
			return fmt.Errorf("zookeeper.acl_digest must be user:password")
		}
	default:
		return fmt.Errorf("backend %q: want redlock, zookeeper or embedded", c.Backend)
	}
	if c.Locks.BoundLeaseMS <= 0 {
		return fmt.Errorf("locks.bound_lease_ms must be positive")
	}
	if c.Locks.RenewEveryMS >= c.Locks.BoundLeaseMS {
		return fmt.Errorf("locks.renew_every_ms (%d) must be shorter than locks.bound_lease_ms (%d)", c.Locks.RenewEveryMS, c.Locks.BoundLeaseMS)
	}
	return nil
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// lockDelay is the lock-delay of each key: that of the first
// locks.lock_delay pattern it matches, else locks.lock_delay_ms. nil when
// every delay is 0.
func (c Config) lockDelay() func(key string) time.Duration {
	on := c.Locks.LockDelayMS > 0
	for _, d := range c.Locks.LockDelay {
		on = on || d.MS > 0
	}
	if !on {
		return nil
	}
	rules := slices.Clone(c.Locks.LockDelay)
	def := time.Duration(c.Locks.LockDelayMS) * time.Millisecond
	return func(key string) time.Duration {
		for _, d := range rules {
			// Redis's glob (as KEYS), in O(len(key)·len(pattern)) time.
			if pubsub.Match(d.Keys, key) {
				return time.Duration(d.MS) * time.Millisecond
			}
		}
		return def
	}
}
