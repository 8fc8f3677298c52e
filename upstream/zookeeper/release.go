package zookeeper

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
	"go.uber.org/zap"
)

// handoff is a key handed to a waiter of this instance, kept until the
// waiter takes it.
type handoff struct {
	path    string
	fence   int64
	version int32 // the place's data version after the handoff's write
	data    zkData
	at      time.Time // when the handoff's multi was sent: validity counts from then
}

// Release deletes key's lock node if token holds it, and hands key to
// line[0], this instance's first waiter for it, when it can; sent runs
// once the release is done. A release that takes the lock from its
// holder (engine.Taking) is a plain one: it leaves its mark (deleteHeld).
func (z *ZooKeeper) Release(ctx context.Context, key, token string, line []engine.Waiter, sent func()) (bool, error) {
	ok := !engine.Taking(ctx) && z.handOver(ctx, key, token, line)
	var err error
	if !ok {
		ok, err = z.release(ctx, key, token, sent != nil)
	}
	if ok && sent != nil {
		sent()
	}
	return ok, err
}

// handOver hands key, held by token through this instance, to line[0],
// and makes line[1]'s place if it has none; it reports whether it did.
// When it did not, nothing changed — or the outcome is unknown, and the
// places are looked after (adoptLock, sweep) — and a plain Release
// follows.
func (z *ZooKeeper) handOver(ctx context.Context, key, token string, line []engine.Waiter) bool {
	if len(line) == 0 || z.usable(key) != nil {
		return false
	}
	next := line[0].ID
	lock, place, facts, ok := z.handTarget(key, token, next)
	if !ok {
		return false
	}
	d := facts.want.lasts(z.wall(), facts.want.ttl())
	d.By = z.id
	// A lease must outlive the session, and the place is ephemeral: it is
	// replaced by its promoted node (claimLease), whose fence is the
	// place's creation zxid — unknown here, then the waiter claims it.
	lease := d.Mode == engine.Lease
	if lease && facts.czxid == 0 {
		return false
	}
	var after *nextPlace
	if len(line) > 1 {
		after = z.planPlace(key, &line[1])
	}
	ops := []any{&zk.DeleteRequest{Path: lock, Version: -1}}
	if lease {
		d.Fence = facts.czxid
		ops = append(ops, z.promoteOps(place, 0, d)...)
	} else {
		ops = append(ops, &zk.SetDataRequest{Path: place, Data: d.encode(), Version: 0})
	}
	ops = append(ops, after.ops(z)...)
	// The client's ctx does not cut the multi short: its outcome is needed.
	ctx, cancel := z.cleanupCtx(ctx)
	defer cancel()
	// The watch on the lock node, of the waiter behind it, fires before the
	// multi's answer comes: it must not wake that waiter before the
	// handoff is recorded, or the waiter reads and rewrites its place.
	undo := z.deleteHere(lock)
	sent := time.Now()
	res, err := zkCall(ctx, z, func() ([]zk.MultiResponse, error) { return z.batch.multi(ops...) })
	if err = multiDone(ops, res, err); err != nil {
		undo()
		if unknownOutcome(err) || errors.Is(err, context.DeadlineExceeded) {
			z.spawn(func() { z.adoptLock(key, next, place) })
		}
		after.failed(z, err)
		z.log.Debug("handoff not made; releasing", zap.String("key", key), zap.Error(err))
		return false
	}
	z.forget(lock)
	h := handoff{path: place, data: d, at: sent}
	owner := int64(0)
	if lease {
		z.forget(place)
		// The promoted node stands at the place's sequence, and its create,
		// unlike createOps', leaves the container's version alone: a next
		// place whose create left facts.version+1 stands right behind it.
		h.path, h.fence = promoted(place), facts.czxid
	} else {
		stat := res[1].Stat
		h.fence, h.version, owner = stat.Czxid, stat.Version, stat.EphemeralOwner
	}
	if !z.track(key, next, h.path, owner, d) {
		return true // the session changed: the place, and the lock, went with it
	}
	if !z.recordHanded(key, next, h) {
		z.undoHanded(ctx, key, h) // the waiter left meanwhile (Leave)
	}
	after.made(z, key, res, h.path, facts.version)
	return true
}

// recordHanded records h, key handed to waiter next, for next to take,
// unless next has left meanwhile (departLocked): false then.
func (z *ZooKeeper) recordHanded(key, next string, h handoff) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if _, gone := z.departed[zkLock{key, next}]; gone {
		return false
	}
	z.handed[zkLock{key, next}] = h
	return true
}

// undoHanded deletes the lock h that a handoff of key made for a waiter
// that did not take it, at the version the handoff left: whichever of the
// handoff and the waiter's departure comes second undoes the first.
func (z *ZooKeeper) undoHanded(ctx context.Context, key string, h handoff) {
	switch err := z.delete(ctx, h.path, h.version); {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		z.forget(h.path)
		z.announce(key)
	case !errors.Is(err, zk.ErrBadVersion): // the lease timer deletes it
		z.log.Debug("handed lock not released", zap.String("key", key), zap.Error(err))
	}
}

// nextPlace is the place that a handoff's or a claim's multi makes for
// the waiter after the one it gives the key to; its ops come last in the
// multi. A nil *nextPlace makes none.
type nextPlace struct {
	w      engine.Waiter
	dir    string
	prefix string
}

// planPlace is the place to make for waiter w in key's line, or nil when
// w needs none: no keep, or a place made through this session already.
func (z *ZooKeeper) planPlace(key string, w *engine.Waiter) *nextPlace {
	if w == nil || w.Keep <= 0 || z.hasPlace(key, w.ID) {
		return nil
	}
	dir := z.dir(key)
	return &nextPlace{w: *w, dir: dir, prefix: dir + "/" + nodePrefix(w.ID, kindPlace)}
}

// ops create the place (createOps).
func (n *nextPlace) ops(z *ZooKeeper) []any {
	if n == nil {
		return nil
	}
	return z.createOps(n.dir, n.prefix, zkData{Token: n.w.ID, Name: n.w.Name})
}

// failed sweeps the place after a multi that failed with err, if it may
// have been made after all.
func (n *nextPlace) failed(z *ZooKeeper, err error) {
	if n != nil && (unknownOutcome(err) || errors.Is(err, context.DeadlineExceeded)) {
		z.spawn(func() { z.sweep(n.prefix) })
	}
}

// made keeps the place the multi made, whose answers end res; before is
// the place or lock just handed on, whose create left beforeVersion.
func (n *nextPlace) made(z *ZooKeeper, key string, res []zk.MultiResponse, before string, beforeVersion int32) {
	if n == nil {
		return
	}
	create, set := res[len(res)-2], res[len(res)-1]
	z.placeMade(key, n.w, create.String, set.Stat.Version, set.Stat.Mzxid, before, beforeVersion)
}

// placeMade keeps the place p that a handoff or a claim made for waiter w,
// which left the container at version. It stands just behind before, the
// node given the key, when before's create left version-1: then it
// watches before; else the waiter is put in line as after a grant (queue).
func (z *ZooKeeper) placeMade(key string, w engine.Waiter, p string, version int32, czxid int64, before string, beforeVersion int32) {
	f := placeFacts{want: wanted(w.ID, w.TTL, w.Mode, w.Name), version: version, czxid: czxid}
	if beforeVersion > 0 && version == beforeVersion+1 {
		f.ahead = before
	}
	if !z.keepPlace(key, w.ID, p, w.Keep, f, true) {
		z.spawn(func() { z.discardPlace(p) })
		return
	}
	if f.ahead == "" {
		z.spawn(func() { z.queue(key, w) })
		return
	}
	// A release through another instance wakes the waiter by this watch.
	// A release through this one wakes it itself: before is then no longer
	// an own lock. One goroutine sets the watch and waits for it (listen).
	// A watch that failed (the connection lost on its way) is announced:
	// the waiter's next try sets it again, instead of waiting for its
	// timer (the lock's lease) while before may be released elsewhere.
	z.spawn(func() {
		if z.watching(before) { // as watch: not watched twice
			return
		}
		switch ch, ok, err := z.getW(before); {
		case ok:
			z.listen(key, before, ch)
		case err != nil || z.owns(before):
			z.announce(key)
		}
	})
}

// handTarget finds what a handoff of key from token to waiter next needs:
// token's lock node, unless its lease ran out as last written here (a
// lock past its expires_at is not held: ownLock), and next's place just
// behind it with what is known of it (the lock next wants).
func (z *ZooKeeper) handTarget(key, token, next string) (lock, place string, f placeFacts, ok bool) {
	lock = z.ownLock(key, token)
	z.mu.Lock()
	defer z.mu.Unlock()
	place = z.places[zkLock{key, next}]
	n := z.own[place]
	if lock == "" || place == "" || n == nil || n.held || n.ahead != lock || n.want.Mode == "" {
		return "", "", placeFacts{}, false
	}
	return lock, place, n.placeFacts, true
}

// adoptLock looks after waiter next's place when it may have become
// next's lock without this instance knowing — a handoff or a claim whose
// outcome is unknown, the place written or replaced by its promoted node:
// if it did, this instance enforces its lease as for any lock it made,
// and next takes it on its next try (against).
func (z *ZooKeeper) adoptLock(key, next, place string) {
	z.retry(func(ctx context.Context) error {
		n, err := z.get(ctx, place)
		if errors.Is(err, zk.ErrNoNode) && promoted(place) != place {
			n, err = z.get(ctx, promoted(place))
			place = promoted(place)
		}
		switch {
		case errors.Is(err, zk.ErrNoNode), errors.Is(err, ErrBadNode):
			return nil
		case err != nil:
			return err
		case n.data.heldBy(next):
			z.sight(n)
			z.track(key, next, place, n.stat.EphemeralOwner, n.data)
		}
		return nil
	})
}

// handedOver takes the key handed to the waiter, if it was, and the lock
// is as the waiter asks. Its validity ends no later than the lease
// written, the deadline of this instance's lease timer.
func (a *acquisition) handedOver() (engine.Grant, bool) {
	z, id := a.z, zkLock{a.key, a.h.Token}
	z.mu.Lock()
	h, ok := z.handed[id]
	delete(z.handed, id)
	current := ok && z.locks[id] == h.path
	z.mu.Unlock()
	if !current || h.data.Mode != a.h.Mode || h.data.ttl() != a.h.TTL {
		return engine.Grant{}, false // the waiter's try reads the nodes
	}
	v := min(h.data.leftHere(), z.guaranteed(h.data.Mode, h.data.ttl())-time.Since(h.at))
	if v <= 0 {
		return engine.Grant{}, false
	}
	a.mine = h.path // should the caller be gone, cleanup releases it
	return engine.Grant{Token: a.h.Token, Fence: h.fence, Validity: v}, true
}

// dropHanded releases a key handed to waiter id that it did not take,
// and marks id as gone, so that a handoff to it still on its way undoes
// itself (recordHanded).
func (z *ZooKeeper) dropHanded(ctx context.Context, key, id string) {
	z.mu.Lock()
	z.departLocked(key, id)
	h, ok := z.handed[zkLock{key, id}]
	delete(z.handed, zkLock{key, id})
	z.mu.Unlock()
	if ok {
		z.undoHanded(ctx, key, h)
	}
}

// maxDeparted bounds the waiters remembered as gone; past it, they are all
// forgotten.
const maxDeparted = 4096

// departLocked marks waiter id of key as gone, until it waits again
// (arrive); z.mu is held.
func (z *ZooKeeper) departLocked(key, id string) {
	if len(z.departed) >= maxDeparted {
		clear(z.departed)
	}
	z.departed[zkLock{key, id}] = struct{}{}
}

// arrive begins a call of waiter id of key: it clears the mark of the
// waiter as gone (it waits again), and counts the call as under way, so
// that its place does not run out meanwhile (endPlace) until tried.
func (z *ZooKeeper) arrive(key, id string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.departed, zkLock{key, id})
	z.trying[zkLock{key, id}]++
}

// tried ends a call of waiter id of key that arrive began. When no other
// call of the waiter is under way here, its place lasts keep from now
// (zero keep: no limit), whether the call kept the place or failed
// before it could (a slow ZooKeeper): the keep counts from the waiter's
// last call.
func (z *ZooKeeper) tried(key, id string, keep time.Duration) {
	z.mu.Lock()
	defer z.mu.Unlock()
	w := zkLock{key, id}
	if z.trying[w]--; z.trying[w] > 0 {
		return
	}
	delete(z.trying, w)
	if n := z.own[z.places[w]]; n != nil && !n.held && keep > 0 {
		n.until = later(n.until, time.Now().Add(keep))
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// release deletes key's lock node if token holds it (version-checked), and
// any place in line of a waiter named token; wakes says the caller wakes
// this instance's waiters itself (Release with sent), so their watch on
// the lock node need not.
func (z *ZooKeeper) release(ctx context.Context, key, token string, wakes bool) (bool, error) {
	if err := z.usable(key); err != nil {
		return false, err
	}
	if p := z.ownLock(key, token); p != "" {
		// A lock node this session made stays the lock for its token until
		// it is deleted: one request, where ZooKeeper's recipe needs one too.
		undo := func() {}
		if wakes {
			undo = z.deleteHere(p)
		}
		del := z.deleteLock
		if engine.Taking(ctx) {
			del = func(ctx context.Context, p string) error { return z.deleteHeld(ctx, key, p, -1) }
		}
		switch err := del(ctx, p); {
		case err == nil:
			z.forget(p)
			return true, nil
		case !errors.Is(err, zk.ErrNoNode):
			undo()
			return false, lostWrite("release", err)
		}
		undo()
		z.forget(p) // gone already (expired): look at the nodes below
	}
	for range maxRounds {
		v, err := z.holder(ctx, key, token)
		if errors.Is(err, engine.ErrNotHeld) {
			return false, z.dropPlaces(ctx, key, v.kids, token)
		}
		if err != nil {
			return false, err
		}
		switch err := z.deleteHeld(ctx, key, v.top.path, v.top.stat.Version); {
		case err == nil:
			z.forget(v.top.path)
			_ = z.dropPlaces(ctx, key, v.kids[1:], token) // best effort: places expire
			return true, nil
		case errors.Is(err, zk.ErrNoNode):
			return false, nil
		case !errors.Is(err, zk.ErrBadVersion):
			return false, lostWrite("release", err)
		}
	}
	return false, errContended
}
