// Package zookeeper is lockproxy's ZooKeeper backend, an engine.Backend over
// one ZooKeeper session: ZooKeeper's lock recipe (a sequential node per
// acquire, the lowest holds the lock, each waiter watches only its
// predecessor, delete to release) with the leases that lockproxy enforces
// itself, since ZooKeeper's nodes have no TTL. Connection-bound locks and
// places in line are ephemeral, ending with the session; leases are
// persistent, outliving the instance that granted them, and any instance
// ends an overdue one.
//
// Files go by what they do for a lock:
//   - zookeeper.go: Options, New, Close, and the backend's state;
//   - session.go: the session — authentication, the negotiated timeout,
//     connection and expiry events (a lost session's connection-bound
//     locks go up to the engine, Events.Lost);
//   - acquire.go: taking a free key, and the grant's fence (the create's zxid);
//   - line.go: waiting — places in line, watching the predecessor, Leave;
//   - release.go: release, and the handoff of a released key to this
//     instance's next waiter in the same multi;
//   - lease.go: Extend, Inspect, the validity a grant may claim, and the
//     timers that end expired leases;
//   - expiry.go: when a lease is over, by this instance's monotonic clock
//     alone (no two instances' clocks need agree): ttl after it wrote the
//     version, or ttl plus the drift allowance after it first read it;
//   - mode.go: the node a lock's mode needs (persistent for a lease,
//     ephemeral and this session's for a bound lock), checked in one
//     place (modeFits), and the conversion of a node whose mode changes
//     or whose bound lock is another session's (rewrite);
//   - held.go: locks taken through another instance (a DEL there): the
//     mark that delete leaves, and the watch on the marks that tells the
//     engine (Events' Taken);
//   - keys.go: the node layout (paths, names, the data a lock node holds);
//   - wire.go and batch.go: the requests, and the batching of the writes that
//     pile up while two multis are on their way.
//
// Beyond the recipe it keeps three mechanisms, because the benchmark needed
// them to reach go-zookeeper's own recipe: a create that finds its node the
// only child takes the lock without a listing (2 requests a cycle against
// the recipe's 3), batching (0.3 requests a cycle at concurrency 32), and
// the handoff (2 requests a contended grant against the recipe's 5). Before
// the three, lockproxy made 0.66x the recipe's cycles/s at concurrency 32
// and 0.56x its contended grants/s; after them, 1.1x to 2.3x and 1.1x to
// 1.5x (README, Benchmark).
//
// What may be deleted: a node that may have become a lock is deleted only
// at the version its deleter saw (a retry of the same token through any
// instance rewrites the node it takes), or when its data names a waiter
// that leaves without the lock. A lock's create whose reply was lost is an
// unknown outcome (engine.UnknownOutcomeError), never "not granted".
//
// What a call does with its context: a request to ZooKeeper cannot be
// cancelled (go-zookeeper takes no context). A call whose ctx has a deadline
// sooner than the session's receive timeout (with a margin: races), or
// made while the session is not connected, is raced against it and returns
// at the deadline, the request finishing on its own; any other call runs
// the request on the caller's goroutine, bounded by that timeout, and
// checks ctx after: no goroutine per request.
//
// It must not import the Redis adapter (upstream), count or remember lost
// locks (the engine does), or know of RESP clients and configuration files.
package zookeeper
