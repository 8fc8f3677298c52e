package zookeeper

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
	"go.uber.org/zap"
)

var _ engine.Backend = (*ZooKeeper)(nil)

// Defaults for the zero values of Options.
const (
	DefaultRoot           = "/lockproxy"
	DefaultSessionTimeout = 10 * time.Second
)

var (
	// ErrNotConnected refuses a call while the ZooKeeper session is not
	// connected: a session that may have expired never grants a lock. It
	// matches engine.ErrUnavailable.
	ErrNotConnected error = unavailable{errors.New("zookeeper: session is not connected")}
	// ErrBadNode means a lock node holds data lockproxy did not write.
	ErrBadNode = errors.New("zookeeper: unexpected data in a ZooKeeper lock node")
)

// unavailable is a ZooKeeper error expected to pass — the connection was
// lost, a leader is being elected, the session expired and a new one is
// on its way — after which a call may be tried again. It matches
// engine.ErrUnavailable as well as the error itself.
type unavailable struct{ err error }

func (u unavailable) Error() string { return u.err.Error() }

func (u unavailable) Unwrap() []error { return []error{engine.ErrUnavailable, u.err} }

// Options configure a ZooKeeper backend. Zero values take the defaults
// noted.
type Options struct {
	Servers []string // host:port of each server of the ensemble
	// Root is the node under which lock nodes live; default "/lockproxy".
	// It is created, with its parents, when missing.
	Root string
	// SessionTimeout is how long the session outlives a lost connection;
	// default 10s. Connection-bound locks and places in line held through
	// a session end with it; leases do not. The ensemble may grant another
	// (between 2 and 20 of its ticks unless configured otherwise), which
	// is logged and bounds a connection-bound lock's validity.
	SessionTimeout time.Duration
	// ACL is given to every node lockproxy creates; default
	// zk.WorldACL(zk.PermAll), or with Digest, that identity's.
	ACL []zk.ACL
	// Digest, "user:password", authenticates the session as that digest
	// identity, and makes it the default ACL: only sessions that know the
	// password can read or change lockproxy's nodes.
	Digest string
	// Events is the engine's: Released when a lock node that a waiter of
	// this instance watches goes away, or when this instance ends an
	// expired lease; Lost for each connection-bound lock held through
	// this instance whose session expired. Nil drops them (tests of the backend alone).
	Events engine.Events
	// TLS, when set, makes the connections to the servers TLS, configured
	// for each server's host by TLS(host); nil: plain TCP.
	TLS func(host string) *tls.Config
}

func (o Options) withDefaults() Options {
	o.Root = strings.TrimSuffix(orDefault(o.Root, DefaultRoot), "/")
	o.SessionTimeout = orDefault(o.SessionTimeout, DefaultSessionTimeout)
	if user, pass, ok := strings.Cut(o.Digest, ":"); ok && len(o.ACL) == 0 {
		o.ACL = zk.DigestACL(zk.PermAll, user, pass)
	}
	if len(o.ACL) == 0 {
		o.ACL = zk.WorldACL(zk.PermAll)
	}
	return o
}

func (o Options) validate() error {
	if len(o.Servers) == 0 {
		return errors.New("zookeeper: needs at least one server")
	}
	if o.Digest != "" && !strings.Contains(o.Digest, ":") {
		return errors.New("zookeeper: digest must be user:password")
	}
	if !strings.HasPrefix(o.Root, "/") || strings.Contains(o.Root, "//") {
		return fmt.Errorf("zookeeper: root %q is not an absolute path such as /lockproxy", o.Root)
	}
	return nil
}

// ZooKeeper is an engine.Backend over a ZooKeeper ensemble, after
// ZooKeeper's lock recipe.
//
// Layout: each key is a container node <Root>/<encodeKey(key)>, which
// ZooKeeper deletes once it is empty. Each acquire, and each waiter's place
// in line, is a sequential child named "<tokenID>-<kind><nonce>-<sequence>"
// (keys.go) holding JSON: the token, mode, ttl_ms, expires_at (unix ms,
// for people: no instance goes by it), the instance that wrote it, and
// the holder's name; a waiter's
// place holds no mode until it becomes the lock. The child with the lowest
// sequence holds the lock. A lease's node is persistent, every other node
// ephemeral: a place or a connection-bound lock that becomes a lease is
// replaced, in one multi, by a persistent node of the same name but kind
// 'l' — at the same sequence, so at the same place in line — that carries
// the replaced node's fence (promoted). A lease that becomes
// connection-bound, or a bound lock of another session taken or renewed
// through this one, is replaced the same way by an ephemeral node of this
// session, kind 'b' (mode.go): persistent ⇔ lease, after every write.
//
// Why the guarantees hold:
//   - Mutual exclusion: ZooKeeper numbers a parent's sequential children in
//     the order it commits them. A server that lists a node has applied
//     every create before it, so a node lowest in such a list has no older
//     rival left, and none can come: later nodes number higher, and the
//     container, whose counter restarts, is only deleted when empty. A
//     create that finds its node the container's only child (createSeq)
//     needs no listing: the multi that makes it reads the container in
//     the same transaction.
//   - Fencing: the fence is the creation zxid (Stat.Czxid) of the node
//     the lock was granted in, or of the node a promoted lease replaced.
//     Zxids grow strictly with every transaction of the ensemble, across
//     leader changes (the epoch is their high half), and a later grant is
//     always a younger node, even after the container was deleted. One
//     multi creates at most one node under a key (batcher.take): nodes
//     made in one multi share its zxid.
//   - Crash: places and connection-bound locks are ephemeral. If lockproxy
//     dies, its session expires and ZooKeeper deletes them. Leases are
//     persistent, as on Redis: they live their whole validity, whatever
//     becomes of the instance that granted them.
//   - Expiry: ZooKeeper's nodes have no TTL that operators can be expected
//     to enable (TTL nodes need extendedTypesEnabled), so lockproxy ends
//     leases itself: the instance that wrote the lease deletes the node
//     when it runs out (its timer), and any instance that meets an
//     overdue lease ahead of its acquire or of its waiter (a timer at the deadline,
//     reapLater) deletes it, by version, so an extension that lands first
//     wins. Bound locks get the same deadline, which the engine's watchdog
//     pushes back (Extend), so a lock the watchdog gave up on cannot stay
//     held while the session lives.
//   - Clocks: each instance judges a lease by its own monotonic clock
//     alone (expiry.go): the writer ttl after it wrote it, any other
//     instance ttl + 1% + 2ms after it first read that version. Safe
//     whatever the instances' wall clocks say, as long as their monotonic
//     clocks run at rates within 1% of each other.
//   - Validity: a lease is valid for its ttl less the time the grant took,
//     counted from before its first request was sent (a handoff's too).
//     A connection-bound lock ends with the session, which may expire the
//     negotiated session timeout after the server last heard from this
//     instance: it is never reported valid for longer (guaranteed).
//   - Waiting: a waiter keeps one place across its calls and watches only
//     the node just before it, so a release wakes one waiter, not all. The
//     place lasts the waiter's Keep after its last call ended, and never
//     ends while a call of it is under way here, however slow ZooKeeper
//     is: the waiter keeps ZooKeeper's order across instances.
//
// Cost: a free key takes two requests, the create (which says whether the
// node is the only one) and the delete; the creates and deletes of many
// clients that pile up go in one multi (batcher); a line of waiters in
// this instance takes two requests per grant: the handoff's multi, and
// the watch of the place it makes for the waiter after (release.go).
//
// Limits: an overdue lease that no instance looks at stays as a node (it
// holds nothing: the next acquire of the key deletes it). A refused try
// for a lease whose instance dies before deleting it leaves a persistent
// node that holds the key until its lease runs out, as a Redis node keeps a
// refused lock it never heard the rollback of. A lease released through
// another instance stays on its owner's books until its deadline.
type ZooKeeper struct {
	conn  *zk.Conn
	batch *batcher // the creates and deletes of locks, batched under load
	opts  Options
	log   *zap.Logger
	done  chan struct{} // closed by Close
	id    string        // names this instance in the leases it writes (zkData.By)
	// wall reads the wall clock for the expires_at a lease is written
	// with, which no decision goes by: time.Now; tests step it.
	wall func() time.Time
	// granted is the session timeout the ensemble granted: a lock bound
	// to the session is reported valid for no longer.
	granted negotiated

	// Test hooks, set before first use. createReturned runs on the
	// request's goroutine when a create succeeded, before the caller hears
	// of it; afterCreate runs on the caller's once it has.
	createReturned, afterCreate func(path string)
	// marksWatched is set once the watch on the marks is first set.
	marksWatched atomic.Bool

	mu        sync.Mutex
	closed    bool
	own       map[string]*ownNode // lock nodes and places created through the session, by path
	locks     map[zkLock]string   // own lock nodes' paths by key and token, for a one-request release
	places    map[zkLock]string   // own waiters' places by key and waiter, for a handoff
	handed    map[zkLock]handoff  // keys handed to waiters of this instance, until they take them
	watched   map[string]int      // watches on a predecessor in flight, by its path
	deleting  map[string]struct{} // watched lock nodes a release through this instance deletes (deleteHere)
	reaping   map[string]bool     // others' lock nodes this instance ends when overdue, for its waiters
	seen      map[string]sighting // lock nodes' versions as first read, by path (expiry.go)
	served    map[zkLock]struct{} // waiters whose token got the key through this instance (servedLocked)
	departed  map[zkLock]struct{} // waiters that left their line, until they wait again (dropHanded)
	trying    map[zkLock]int      // calls of waiters under way here, by key and waiter: their places do not run out meanwhile (arrive)
	orphans   map[string]zkLock   // bound lock nodes moved into the session that nobody here holds (disown), by path
	bg        sync.WaitGroup      // background work: cleanups, timers, watch listeners
	closeOnce sync.Once
}

// zkLock names a lock: a key and its holder's token.
type zkLock struct{ key, token string }

// New connects to the ensemble in the background and returns at
// once; calls are refused (ErrNotConnected) until a session is
// established. go-zookeeper reconnects by itself, with a new session after
// one expired. Close ends the session.
func New(opts Options, log *zap.Logger) (*ZooKeeper, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	z := &ZooKeeper{
		opts:     opts,
		log:      log,
		id:       instanceID(),
		wall:     time.Now,
		done:     make(chan struct{}),
		own:      map[string]*ownNode{},
		locks:    map[zkLock]string{},
		places:   map[zkLock]string{},
		handed:   map[zkLock]handoff{},
		watched:  map[string]int{},
		deleting: map[string]struct{}{},
		reaping:  map[string]bool{},
		seen:     map[string]sighting{},
		served:   map[zkLock]struct{}{},
		departed: map[zkLock]struct{}{},
		trying:   map[zkLock]int{},
		orphans:  map[string]zkLock{},
	}
	dial := zk.Dialer(net.DialTimeout) // go-zookeeper's own default
	if opts.TLS != nil {
		dial = tlsDialer(opts.TLS, opts.SessionTimeout, log)
	}
	conn, _, err := zk.Connect(opts.Servers, opts.SessionTimeout,
		zk.WithLogger(zkLogger{log: log, requested: opts.SessionTimeout, granted: &z.granted}),
		zk.WithEventCallback(z.event), zk.WithDialer(dial))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	z.conn = conn
	z.batch = &batcher{send: conn.Multi, del: conn.Delete}
	if err := z.authenticate(); err != nil {
		conn.Close()
		return nil, err
	}
	z.spawn(z.watchMarks) // locks taken through other instances
	return z, nil
}

// Connected reports whether the session is established and its timeout
// known, that is whether the backend takes new locks (for health checks).
func (z *ZooKeeper) Connected() bool {
	_, known := z.sessionTimeout()
	return known && z.conn.State() == zk.StateHasSession
}

// sessionTimeout is the timeout the ensemble granted the current session;
// false until it is known.
func (z *ZooKeeper) sessionTimeout() (time.Duration, bool) {
	return z.granted.of(z.conn.SessionID())
}

// Close ends the session, which frees its ephemeral nodes (the
// connection-bound locks and the places in line taken through this
// instance), and waits for background work. A bound lock that a late
// retry moved into this session and nobody here holds (disown) is parked
// first: its holder is elsewhere. Leases stay until they are
// released or run out; any instance ends them then.
func (z *ZooKeeper) Close() error {
	z.closeOnce.Do(func() {
		z.mu.Lock()
		z.closed = true
		for _, n := range z.own {
			n.timer.Stop()
		}
		orphans := z.orphans
		z.orphans = map[string]zkLock{}
		clear(z.own)
		clear(z.locks)
		z.mu.Unlock()
		close(z.done)
		for p, l := range orphans {
			z.park(l.key, l.token, p)
		}
		z.conn.Close()
		z.bg.Wait()
	})
	return nil
}

// usable refuses calls on a closed backend, an empty key, or without a
// session.
func (z *ZooKeeper) usable(key string) error {
	switch {
	case z.isClosed():
		return ErrClosed
	case key == "":
		return errors.New("zookeeper: empty lock key")
	case !z.Connected():
		return ErrNotConnected
	}
	return nil
}

func (z *ZooKeeper) isClosed() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.closed
}

// dir is key's container node.
func (z *ZooKeeper) dir(key string) string { return z.opts.Root + "/" + encodeKey(key) }

// spawn runs f in the background unless the backend is closed; Close waits
// for it.
func (z *ZooKeeper) spawn(f func()) {
	if !z.enterBG() {
		return
	}
	go func() {
		defer z.bg.Done()
		f()
	}()
}

// inBG runs f now, counted as background work, unless the backend is closed.
func (z *ZooKeeper) inBG(f func()) {
	if !z.enterBG() {
		return
	}
	defer z.bg.Done()
	f()
}

func (z *ZooKeeper) enterBG() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return false
	}
	z.bg.Add(1)
	return true
}

// announce tells the engine that key may be free.
func (z *ZooKeeper) announce(key string) {
	if z.opts.Events != nil && !z.isClosed() {
		z.opts.Events.Released(key, "")
	}
}
