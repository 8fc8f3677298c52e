package zookeeper

import (
	"context"
	"errors"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
	"go.uber.org/zap"
)

// ownNode is a lock node or a waiter's place that this instance created
// and still answers for: its timer deletes it when its lease, or the
// place's keep, runs out. Fields are guarded by ZooKeeper.mu.
type ownNode struct {
	key, token string
	held       bool      // a lock; false: a waiter's place
	persistent bool      // a lease's node, which outlives the session
	until      time.Time // a place's end, unless its waiter calls again (or is calling: endPlace)
	// wrote is a lock's data as this instance last wrote it, or read it
	// (then its at is zero): its version ends by this instance's clock
	// (expiry.go).
	wrote      zkData
	timer      *time.Timer
	placeFacts // a place's: what a handoff needs
}

// placeFacts are what a handoff needs to know of a waiter's place.
type placeFacts struct {
	// ahead is the node just before the place, as last listed or as the
	// container's versions show ("" if unknown); want is the lock the
	// waiter asks for (no Mode: unknown).
	ahead string
	want  zkData
	// version is the container's data version that the place's create
	// left (0 if unknown). Every create rewrites the container's data in
	// the same multi, so a create that leaves version+1 made the very
	// next node after this one.
	version int32
	czxid   int64 // the place's creation zxid, its fence (0 if unknown)
}

// node is the record of own node p, made if missing; z.mu is held.
func (z *ZooKeeper) node(p, key, token string) *ownNode {
	n := z.own[p]
	if n == nil {
		n = &ownNode{key: key, token: token}
		n.timer = time.AfterFunc(time.Hour, func() { z.inBG(func() { z.expire(p, n) }) })
		z.own[p] = n
	}
	return n
}

// track arms the timer that ends the lease of lock node p when this
// session owns it, or when it is a lease's persistent node (owner 0),
// which this instance then ends too once it is overdue. It reports false
// when owner, the node's session, is another: another instance's, or this
// instance's previous one, which has expired.
func (z *ZooKeeper) track(key, token, p string, owner int64, d zkData) bool {
	z.mu.Lock()
	if z.closed || owner != 0 && owner != z.conn.SessionID() {
		z.mu.Unlock()
		return false
	}
	n := z.node(p, key, token)
	if !n.held && z.places[zkLock{key, n.token}] == p {
		delete(z.places, zkLock{key, n.token})
	}
	n.held, n.token, n.persistent, n.wrote = true, token, owner == 0, d
	n.timer.Reset(max(ends(d), 0))
	z.locks[zkLock{key, token}] = p
	orphan := z.servedLocked(key, token, p)
	z.mu.Unlock()
	if orphan != "" {
		z.spawn(func() { z.discardPlace(orphan) })
	}
	return true
}

// ends is when to look again at a lock whose data is d, to end it: when
// its lease runs out if this instance wrote d, else once it would have
// run out with the drift allowance if it began now.
func ends(d zkData) time.Duration {
	if !d.at.IsZero() {
		return d.leftHere()
	}
	return d.ttl() + drift(d.ttl())
}

// maxServed bounds the waiters remembered as served; past it, they are all
// forgotten (a place made for one of them afterwards is then kept until
// its keep runs out).
const maxServed = 4096

// servedLocked records that token, a waiter's id, got key: lock p is its.
// It returns the waiter's place in line, if it has another, which the
// caller deletes. A served waiter waits no more, and a place left in line
// for it, before the waiters behind, would hold them up until its keep
// ran out: a place made on its behalf later (keepPlace) is not kept
// either. z.mu is held.
func (z *ZooKeeper) servedLocked(key, token, p string) (orphan string) {
	id := zkLock{key, token}
	if len(z.served) >= maxServed {
		clear(z.served)
	}
	z.served[id] = struct{}{}
	if q := z.places[id]; q != "" && q != p {
		return q
	}
	return ""
}

// ownLock is the path of the lock node this session made for key and
// token, "" if none, if this instance did not write it last, or if its
// lease ran out as last written here.
func (z *ZooKeeper) ownLock(key, token string) string {
	z.mu.Lock()
	defer z.mu.Unlock()
	p := z.locks[zkLock{key, token}]
	if n := z.own[p]; n == nil || n.wrote.at.IsZero() || n.wrote.leftHere() <= 0 {
		return ""
	}
	return p
}

// owns reports whether p is an own node, not deleted through this
// instance.
func (z *ZooKeeper) owns(p string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.own[p] != nil
}

// hasPlace reports whether waiter id has a place in key's line, made
// through this session.
func (z *ZooKeeper) hasPlace(key, id string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.places[zkLock{key, id}] != ""
}

// placeCzxid is own place p's creation zxid, 0 if unknown.
func (z *ZooKeeper) placeCzxid(p string) int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	if n := z.own[p]; n != nil && !n.held {
		return n.czxid
	}
	return 0
}

// placeVersion is the container's version that own place p's create left,
// 0 if unknown.
func (z *ZooKeeper) placeVersion(p string) int32 {
	z.mu.Lock()
	defer z.mu.Unlock()
	if n := z.own[p]; n != nil {
		return n.version
	}
	return 0
}

// keepPlace (re)starts the keep of waiter id's place p: unless the waiter
// calls again within keep, the place is deleted. Zero keep: no limit. It
// records what a handoff needs to know of the place; a version already
// known is kept when f knows none. A place made on the waiter's behalf (a
// grant's next waiter, not its own call) is not kept once the waiter was
// served (servedLocked): it reports false, and the caller deletes p.
func (z *ZooKeeper) keepPlace(key, id, p string, keep time.Duration, f placeFacts, onBehalf bool) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if _, ok := z.served[zkLock{key, id}]; ok {
		if onBehalf {
			return false
		}
		delete(z.served, zkLock{key, id}) // it waits again, with the same token
	}
	if keep <= 0 || z.closed {
		return true
	}
	if n := z.node(p, key, id); !n.held {
		n.until = time.Now().Add(keep)
		n.timer.Reset(keep)
		if f.version == 0 {
			f.version = n.version
		}
		if f.czxid == 0 {
			f.czxid = n.czxid
		}
		n.placeFacts = f
		z.places[zkLock{key, id}] = p
	}
	return true
}

// forget drops the record of own node p.
func (z *ZooKeeper) forget(p string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if n := z.own[p]; n != nil {
		n.timer.Stop()
		delete(z.own, p)
		z.unindex(p, n)
	}
	delete(z.seen, p)
}

// unindex drops own node p, whose record n is gone, from the indexes by
// key and token; z.mu is held.
func (z *ZooKeeper) unindex(p string, n *ownNode) {
	id := zkLock{n.key, n.token}
	if !n.held {
		if z.places[id] == p {
			delete(z.places, id)
		}
		return
	}
	if z.locks[id] == p {
		delete(z.locks, id)
	}
	if z.handed[id].path == p {
		delete(z.handed, id)
	}
}

// rearm runs n's timer again after d, if n is still the record of p.
func (z *ZooKeeper) rearm(p string, n *ownNode, d time.Duration) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.own[p] == n {
		n.timer.Reset(d)
	}
}

// expire runs on n's timer: it ends p's lease or place if its time is up.
func (z *ZooKeeper) expire(p string, n *ownNode) {
	z.mu.Lock()
	current, held := z.own[p] == n, n.held
	z.mu.Unlock()
	switch {
	case !current:
	case !z.Connected():
		z.rearm(p, n, z.retryDelay())
	case held:
		z.endLease(p, n)
	default:
		z.endPlace(p, n)
	}
}

// retryDelay is how soon a timer that failed to reach ZooKeeper tries
// again: a tenth of the session timeout, at least 50ms.
func (z *ZooKeeper) retryDelay() time.Duration {
	return max(z.opts.SessionTimeout/10, 50*time.Millisecond)
}

// endLease deletes lock node p once it is over (dueIn), re-reading it
// first: another instance may have extended it. The delete is
// version-checked, so an extension that lands meanwhile wins.
func (z *ZooKeeper) endLease(p string, n *ownNode) {
	ctx, cancel := z.cleanupCtx(context.Background())
	defer cancel()
	ln, err := z.get(ctx, p)
	if err == nil {
		if due := z.dueIn(ln); due > 0 {
			z.rearm(p, n, due)
			return
		}
	}
	switch {
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, ErrBadNode):
		z.forget(p)
		return
	case err != nil:
		z.rearm(p, n, z.retryDelay())
		return
	}
	switch err := z.delete(ctx, p, ln.stat.Version); {
	case err == nil:
		z.forget(p)
		z.log.Debug("lease ran out; lock deleted", zap.String("key", n.key))
		z.announce(n.key)
	case errors.Is(err, zk.ErrNoNode):
		z.forget(p)
	case errors.Is(err, zk.ErrBadVersion):
		z.rearm(p, n, 0) // extended since the read: read again
	default:
		z.rearm(p, n, z.retryDelay())
	}
}

// endPlace deletes waiter place p once its keep has run out, unless a call
// of its waiter is under way here (arrive): the call keeps the place, or
// the keep counts from its end (tried), however long ZooKeeper made it
// take. The delete expects version 0, the place as created: a place that
// became a lock (written since) stays, and its lease timer takes over —
// armed here if this instance did not know of the write (a claim whose
// caller's ctx ended while it was on its way).
func (z *ZooKeeper) endPlace(p string, n *ownNode) {
	z.mu.Lock()
	wait, trying := time.Until(n.until), z.trying[zkLock{n.key, n.token}] > 0
	z.mu.Unlock()
	switch {
	case wait > 0:
		z.rearm(p, n, wait)
		return
	case trying: // looked at again after the call
		z.rearm(p, n, z.retryDelay())
		return
	}
	ctx, cancel := z.cleanupCtx(context.Background())
	defer cancel()
	switch err := z.delete(ctx, p, 0); {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		z.mu.Lock()
		if z.own[p] == n && !n.held {
			n.timer.Stop()
			delete(z.own, p)
			z.unindex(p, n)
		}
		z.mu.Unlock()
	case errors.Is(err, zk.ErrBadVersion):
		z.adoptLock(n.key, n.token, p)
	default:
		z.rearm(p, n, z.retryDelay())
	}
}

// cleanupCtx bounds one cleanup step by the session timeout, whatever
// ctx's own deadline or cancellation: the client may be gone.
func (z *ZooKeeper) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), z.opts.SessionTimeout)
}

// dropWithin bounds the first, synchronous, attempt to delete a node a
// call leaves behind; the background carries on after it.
const dropWithin = 2 * time.Second

// drop deletes node p, which a call created or made the lock and does
// not keep, if it is still at version, as the call left it: a lock that a
// retry of the same token rewrote since (against) is that retry's. Once
// now, and if that fails, in the background for as long as the session
// lives.
func (z *ZooKeeper) drop(ctx context.Context, p string, version int32) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(dropWithin, z.opts.SessionTimeout))
	defer cancel()
	if err := z.deleteAt(ctx, p, version); err != nil {
		z.spawn(func() { z.discard(p, version) })
	}
}

// discard deletes node p at version, retrying while the session that made
// it lives.
func (z *ZooKeeper) discard(p string, version int32) {
	z.retry(func(ctx context.Context) error { return z.deleteAt(ctx, p, version) })
}

// deleteAt deletes node p if it is at version, and forgets it; a node
// gone is forgotten too. One changed since is no failure: a lock now,
// which its holder or its own timer ends.
func (z *ZooKeeper) deleteAt(ctx context.Context, p string, version int32) error {
	switch err := z.delete(ctx, p, version); {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		z.forget(p)
	case !errors.Is(err, zk.ErrBadVersion):
		return err
	}
	return nil
}

// sweep deletes the nodes whose names start with prefix — the node of a
// create whose outcome is unknown — retrying while the session lives. It
// deletes them only as created (version 0): nobody was told of such a
// node, so it was granted to no one unless a retry of its token through
// another instance took it since (against), which writes it.
func (z *ZooKeeper) sweep(prefix string) {
	dir, name := path.Split(prefix)
	dir = strings.TrimSuffix(dir, "/")
	z.retry(func(ctx context.Context) error {
		kids, err := z.children(ctx, dir)
		if err != nil {
			return err
		}
		for _, c := range kids {
			if !strings.HasPrefix(c.name, name) {
				continue
			}
			if err := z.deleteAt(ctx, dir+"/"+c.name, 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// retry runs step until it succeeds, the backend closes, or the session
// changes (the ephemeral nodes step deals with ended with the old one),
// waiting 50ms, then twice as long each time up to 2s.
func (z *ZooKeeper) retry(step func(ctx context.Context) error) {
	session := z.conn.SessionID()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		ctx, cancel := z.cleanupCtx(context.Background())
		err := step(ctx)
		cancel()
		if err == nil || z.conn.SessionID() != session {
			return
		}
		select {
		case <-z.done:
			return
		case <-time.After(wait):
		}
	}
}

// Extend resets the lease of key held by token to ttl from now — a zero
// ttl reuses the stored ttl_ms — and records mode unless it is empty. Mode
// Bound, the watchdog's renewal, fails with ErrNotBound once the lock is
// a lease. The write is version-checked, and converts the node when the
// mode changes or a bound lock's node is another session's (rewrite): the
// validity is then this session's, counted from before the first request
// was sent. The instance that owns the node re-arms its timer.
func (z *ZooKeeper) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	if err := z.usable(key); err != nil {
		return 0, err
	}
	start := time.Now()
	for range maxRounds {
		v, err := z.holder(ctx, key, token)
		if err != nil {
			return 0, err
		}
		d, err := extended(v.top.data, z.wall(), ttl, mode)
		if err != nil {
			return 0, err
		}
		d.By, d.Fence = z.id, v.top.fence() // as rewrite writes it: track knows it by its bytes
		w, err := z.rewrite(ctx, "extend", key, token, v.top, d)
		if errors.Is(err, errAgain) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if !z.track(key, token, w.path, w.owner, d) && d.Mode != engine.Lease {
			return 0, ErrNotConnected // the session changed: the node went with it
		}
		z.renewedHere(key, token, v.top.path, w, mode)
		return z.guaranteed(d.Mode, d.ttl()) - time.Since(start), nil
	}
	return 0, errContended
}

// renewedHere records who holds lock node w, which an Extend of mode
// wrote from node was: the watchdog's renewal (Bound) has its holder here
// (claim); any other Extend that moved a bound lock into this session did
// it for a holder that may be elsewhere (disown), whom Close must not
// take it from.
func (z *ZooKeeper) renewedHere(key, token, was string, w written, mode engine.Mode) {
	switch {
	case mode == engine.Bound:
		z.claim(w.path)
	case w.path != was && w.owner != 0:
		z.disown(key, token, w.path)
	}
}

// extended is lock data d with its lease reset to ttl from now (zero
// ttl: d's own) and its mode set to mode (empty: d's own).
func extended(d zkData, now time.Time, ttl time.Duration, mode engine.Mode) (zkData, error) {
	if mode == engine.Bound && d.Mode == engine.Lease && !d.Parked {
		return d, engine.ErrNotBound
	}
	if mode != "" {
		d.Mode, d.Parked = mode, false
	}
	if ttl <= 0 {
		ttl = d.ttl()
	}
	return d.lasts(now, ttl), nil
}

// guaranteed is how long a lock of mode, asked for ttl, is safe from the
// moment the ensemble answered: a lease its whole ttl (its node outlives
// any session); a connection-bound lock no longer than the session
// timeout the ensemble granted, since its node goes when the session
// expires, which may happen that long after the server last heard from
// this instance.
func (z *ZooKeeper) guaranteed(mode engine.Mode, ttl time.Duration) time.Duration {
	if mode == engine.Lease {
		return ttl
	}
	timeout, known := z.sessionTimeout()
	if !known {
		return 0
	}
	return min(ttl, timeout)
}

// Inspect reads key's lowest node: the fence is its creation zxid, the
// validity what is left of its lease by this instance's clock (dueIn: an
// upper bound for a lease another instance wrote; 0 once it ran out,
// until someone deletes it). A waiter's place that has not taken the key yet holds
// nothing.
func (z *ZooKeeper) Inspect(ctx context.Context, key string) (engine.Holder, bool, error) {
	if err := z.usable(key); err != nil {
		return engine.Holder{}, false, err
	}
	v, err := z.read(ctx, z.dir(key))
	if err != nil || !v.held() {
		return engine.Holder{}, false, err
	}
	d := v.top.data
	left := max(min(z.dueIn(v.top), z.guaranteed(d.Mode, d.ttl())), 0)
	return engine.Holder{Token: d.Token, Fence: v.top.fence(), Validity: left, Mode: d.Mode, Name: d.Name}, true, nil
}
