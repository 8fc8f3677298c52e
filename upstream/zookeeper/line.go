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

// wait is the acquire of a waiter: its place becomes the lock once it is
// the lowest, else it watches the node just before it.
func (a *acquisition) wait(ctx context.Context) (engine.Grant, error) {
	if g, ok := a.handedOver(); ok {
		return g, nil
	}
	for range maxRounds {
		kids, i, err := a.place(ctx)
		if err != nil {
			return engine.Grant{}, err
		}
		var g engine.Grant
		if i == 0 {
			g, err = a.claim(ctx, a.dir+"/"+kids[0].name)
		} else {
			g, err = a.behind(ctx, kids, i)
		}
		if !errors.Is(err, errAgain) {
			return g, err
		}
	}
	return engine.Grant{}, errContended
}

// place lists key's nodes and finds the waiter's place, kids[i], making it
// if the waiter has none.
func (a *acquisition) place(ctx context.Context) (kids []child, i int, err error) {
	for range 2 {
		if kids, err = a.z.children(ctx, a.dir); err != nil {
			return nil, -1, err
		}
		if i = firstWithPrefix(kids, placePrefix(a.h.Waiter.ID)); i >= 0 {
			return kids, i, nil
		}
		if a.created != "" { // made by this call and deleted since
			a.z.drop(ctx, a.created, 0)
		}
		c, err := a.create(ctx, a.h.Waiter.ID, kindPlace, zkData{Token: a.h.Waiter.ID, Name: a.h.Name})
		if err != nil {
			return nil, -1, err
		}
		if c.alone { // the only node, so the lowest
			return parseChildren([]string{path.Base(c.path)}), 0, nil
		}
	}
	return nil, -1, errContended
}

// claim makes the waiter's place p, the lowest node, the lock. A place is
// at version 0 until then: a later version means an earlier call of this
// waiter made it the lock already.
func (a *acquisition) claim(ctx context.Context, p string) (engine.Grant, error) {
	d := a.holdData()
	if d.Mode == engine.Lease {
		return a.claimLease(ctx, p, d)
	}
	stat, err := a.claimWrite(ctx, p, d)
	switch {
	case err == nil:
		return a.grant(written{path: p, fence: stat.Czxid, version: stat.Version, owner: stat.EphemeralOwner}, d, true)
	case errors.Is(err, zk.ErrBadVersion):
		return a.against(ctx, p)
	case errors.Is(err, zk.ErrNoNode):
		return engine.Grant{}, errAgain
	}
	return engine.Grant{}, err
}

// claimLease makes the waiter's place p, the lowest node, the lease d. A
// place is ephemeral, and a lease must outlive the session: p is replaced
// by its promoted node, persistent, at the same place in line, which
// keeps p's creation zxid as its fence. As in claimWrite, the same multi
// makes the place of this instance's next waiter.
func (a *acquisition) claimLease(ctx context.Context, p string, d zkData) (engine.Grant, error) {
	fence := a.z.placeCzxid(p)
	if p == a.created {
		fence = a.czxid
	}
	if fence == 0 {
		n, err := a.z.get(ctx, p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return engine.Grant{}, errAgain
		case err != nil:
			return engine.Grant{}, err
		case n.stat.Version != 0: // written: a lock already
			return a.against(ctx, p)
		}
		fence = n.stat.Czxid
	}
	d.Fence = fence
	next := a.z.planPlace(a.key, a.h.Next)
	ops := append(a.z.promoteOps(p, 0, d), next.ops(a.z)...)
	cctx, cancel := a.z.cleanupCtx(ctx)
	defer cancel()
	res, err := zkCall(cctx, a.z, func() ([]zk.MultiResponse, error) { return a.z.batch.multi(ops...) })
	if err = multiDone(ops, res, err); err != nil {
		next.failed(a.z, err)
		if unknownOutcome(err) || errors.Is(err, context.DeadlineExceeded) {
			a.z.spawn(func() { a.z.adoptLock(a.key, a.h.Token, p) })
		}
		switch {
		case errors.Is(err, zk.ErrBadVersion):
			return a.against(ctx, p)
		case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrNodeExists):
			return engine.Grant{}, errAgain
		}
		return engine.Grant{}, zkErr("claim", p, err)
	}
	// The promoted node stands at p's sequence, and its create leaves the
	// container's version alone: the next place stands right behind it
	// when its create left p's version+1 (placeMade).
	version := a.z.placeVersion(p)
	if p == a.created {
		version, a.created = a.version, ""
	}
	a.z.forget(p)
	lease := promoted(p)
	next.made(a.z, a.key, res, lease, version)
	return a.grant(written{path: lease, fence: fence}, d, true)
}

// claimWrite writes the lock d into the waiter's place p, expected at
// version 0. When this instance's next waiter, h.Next, has no place yet,
// the same multi makes it, just behind p unless another create came
// between (placeMade): then the release can hand it the key (handOver).
func (a *acquisition) claimWrite(ctx context.Context, p string, d zkData) (*zk.Stat, error) {
	next := a.z.planPlace(a.key, a.h.Next)
	if next == nil {
		return a.z.set(ctx, p, d, 0)
	}
	ops := append([]any{&zk.SetDataRequest{Path: p, Data: d.encode(), Version: 0}}, next.ops(a.z)...)
	// The caller's ctx does not cut the multi short: the place it makes is
	// kept or swept, and should the caller be gone, Acquire drops the lock.
	ctx, cancel := a.z.cleanupCtx(ctx)
	defer cancel()
	res, err := zkCall(ctx, a.z, func() ([]zk.MultiResponse, error) { return a.z.batch.multi(ops...) })
	if err = multiDone(ops, res, err); err != nil {
		next.failed(a.z, err)
		return nil, zkErr("claim", p, err)
	}
	version := a.z.placeVersion(p)
	if p == a.created {
		version = a.version
	}
	next.made(a.z, a.key, res, p, version)
	return res[0].Stat, nil
}

// behind answers a waiter whose place is kids[i], not the lowest: granted
// again if its token holds the key already (its place goes), else refused
// with a watch set on the node just before the place.
func (a *acquisition) behind(ctx context.Context, kids []child, i int) (engine.Grant, error) {
	p := a.dir + "/" + kids[i].name
	g, err := a.against(ctx, a.dir+"/"+kids[0].name)
	if err == nil {
		a.z.drop(ctx, p, 0)
		if a.created == p {
			a.created = ""
		}
		return g, nil
	}
	if !errors.Is(err, engine.ErrNotAcquired) {
		return g, err
	}
	if werr := a.watchAhead(ctx, kids, i); werr != nil {
		return engine.Grant{}, werr
	}
	var busy *engine.BusyError
	if errors.As(err, &busy) {
		a.z.reapLater(a.key, a.dir+"/"+kids[0].name, busy.RetryAfter)
	}
	return g, err
}

// maxReaping bounds the lock nodes this instance waits to end at once.
const maxReaping = 4096

// reapLater ends lock node p of key after wait if it is then an overdue
// lease, for a waiter here: the instance that granted the lease may be
// gone, and with it the timer that would have ended it, and the watch
// wakes the waiter only once someone deletes the node. One timer per
// node; it stops when the node is gone or is not a lease.
func (z *ZooKeeper) reapLater(key, p string, wait time.Duration) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed || z.reaping[p] || len(z.reaping) >= maxReaping || z.own[p] != nil {
		return
	}
	z.reaping[p] = true
	time.AfterFunc(wait, func() { z.inBG(func() { z.reapDue(key, p) }) })
}

// reapDue runs reapLater's timer.
func (z *ZooKeeper) reapDue(key, p string) {
	z.mu.Lock()
	delete(z.reaping, p)
	z.mu.Unlock()
	ctx, cancel := z.cleanupCtx(context.Background())
	defer cancel()
	n, err := z.get(ctx, p)
	switch {
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, ErrBadNode), n.data.Mode != engine.Lease && err == nil:
		return
	case err != nil:
		z.reapLater(key, p, z.retryDelay())
	case !z.overdue(n):
		z.reapLater(key, p, z.dueIn(n))
	default:
		if err := z.reap(ctx, key, n); errors.Is(err, errAgain) {
			z.announce(key)
		} else {
			z.reapLater(key, p, z.retryDelay())
		}
	}
}

// watchAhead watches the node before the waiter's place kids[i] and keeps
// the place; errAgain if that node is gone already.
func (a *acquisition) watchAhead(ctx context.Context, kids []child, i int) error {
	ok, err := a.z.watch(ctx, a.key, a.dir+"/"+kids[i-1].name)
	if err == nil && !ok {
		err = errAgain
	}
	if err == nil && !a.keep(a.dir+"/"+kids[i].name, a.dir+"/"+kids[i-1].name) {
		err = errServed
	}
	return err
}

// errServed ends putting a waiter in line on its behalf (queue): it got
// the key meanwhile.
var errServed = errors.New("zookeeper: the waiter got the key meanwhile")

// keep keeps the waiter's place p in line for the waiter's Keep; ahead is
// the node just before it, "" if none. A place kept on the waiter's behalf
// (queue) is deleted instead if the waiter was served meanwhile: it
// reports false then.
func (a *acquisition) keep(p, ahead string) bool {
	f := placeFacts{ahead: ahead, want: wanted(a.h.Token, a.h.TTL, a.h.Mode, a.h.Name)}
	if p == a.created {
		f.version, f.czxid = a.version, a.czxid
	}
	if !a.z.keepPlace(a.key, a.h.Waiter.ID, p, a.h.Waiter.Keep, f, a.onBehalf) {
		// Not cleanup's to delete: the waiter may have taken p as its lock.
		if p == a.created {
			a.created = ""
		}
		a.z.discardPlace(p)
		return false
	}
	a.kept = p
	return true
}

// queue gives waiter w of key a place in line, in the background after a
// grant (Hold.Next): its watch wakes it when the key is released through
// any instance. If the key is free already, it announces it.
func (z *ZooKeeper) queue(key string, w engine.Waiter) {
	ctx, cancel := z.cleanupCtx(context.Background())
	defer cancel()
	a := &acquisition{z: z, key: key, dir: z.dir(key), h: engine.Hold{Token: w.ID, TTL: w.TTL, Mode: w.Mode, Name: w.Name, Waiter: &w}, onBehalf: true}
	if err := a.line(ctx); err != nil {
		z.log.Debug("next waiter not put in line; it tries on its own", zap.String("key", key), zap.Error(err))
	}
	a.cleanup(ctx, true)
}

// line puts the waiter in line without taking the lock.
func (a *acquisition) line(ctx context.Context) error {
	for range maxRounds {
		kids, i, err := a.place(ctx)
		if err != nil {
			return err
		}
		if i == 0 {
			if !a.keep(a.dir+"/"+kids[0].name, "") {
				return errServed
			}
			a.z.announce(a.key)
			return nil
		}
		if err := a.watchAhead(ctx, kids, i); !errors.Is(err, errAgain) {
			return err
		}
	}
	return errContended
}

// watch sets a watch on lock node p, which stands just before a waiter of
// key in line: its deletion announces key (Events.Released). It reports false
// when p is gone already. A node watched already is not watched twice.
func (z *ZooKeeper) watch(ctx context.Context, key, p string) (bool, error) {
	if z.watching(p) {
		return true, nil
	}
	return zkCall(ctx, z, func() (bool, error) { return z.setWatch(key, p) })
}

// setWatch sets a data watch on p and has listen wait for it on a
// goroutine of its own.
func (z *ZooKeeper) setWatch(key, p string) (bool, error) {
	ch, ok, err := z.getW(p)
	if ok {
		z.spawn(func() { z.listen(key, p, ch) })
	}
	return ok, err
}

// getW sets a data watch on p, whose event comes on the channel; false
// when p is gone. GetW, unlike ExistsW, leaves no watch behind when the
// node is gone.
func (z *ZooKeeper) getW(p string) (<-chan zk.Event, bool, error) {
	// Counted from before it is sent: a release through this instance
	// that the server orders after the watch must know of it (deleteHere).
	z.mu.Lock()
	z.watched[p]++
	z.mu.Unlock()
	_, _, ch, err := z.conn.GetW(p)
	if err != nil {
		z.unwatched(p)
	}
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, zkErr("watch", p, err)
	}
	return ch, true, nil
}

// unwatched counts one watch on p less.
func (z *ZooKeeper) unwatched(p string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.watched[p]--; z.watched[p] <= 0 {
		delete(z.watched, p)
	}
}

// listen waits, on the caller's goroutine, for the watch on p whose event
// comes on ch, and for the watches that it sets in its place (heard).
func (z *ZooKeeper) listen(key, p string, ch <-chan zk.Event) {
	for ch != nil {
		ev := <-ch
		z.unwatched(p)
		p, ch = z.heard(key, p, ev)
	}
}

// heard handles the event of the watch on p, and returns the node watched
// in its place and the channel of that watch, if any. A deletion announces
// key, unless p was replaced by its converted node (its lock's mode
// changed, or a bound lock moved to another session under the same name),
// which is then watched instead; a change of data (an extension) only
// renews the watch. A watch that ends with the session or the backend
// announces nothing: the waiter's place went too, and its next try says
// so.
func (z *ZooKeeper) heard(key, p string, ev zk.Event) (string, <-chan zk.Event) {
	switch ev.Type {
	case zk.EventNodeDeleted:
		if z.deletedHere(p) {
			return "", nil
		}
		for _, kind := range []byte{kindLease, kindBound} { // its mode changed, or it moved (rewrite)
			next := converted(p, kind)
			if ch, ok, err := z.getW(next); err == nil && ok {
				return next, ch
			}
		}
		z.announce(key)
	case zk.EventNodeDataChanged:
		ch, ok, err := z.getW(p)
		if ok {
			return p, ch
		}
		if err == nil {
			z.announce(key)
		}
	}
	return "", nil
}

// maxDeleting bounds the deletions remembered for their watches; past it
// they are forgotten, and a watch wakes a waiter for nothing.
const maxDeleting = 4096

// deleteHere notes that a release through this instance is about to
// delete lock node p, when a waiter of this instance watches it: the
// release wakes the waiter (Release with sent), and the watch, whose
// event may come before the release's answer, must not wake it earlier.
// A release that fails calls undo.
func (z *ZooKeeper) deleteHere(p string) (undo func()) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.watched[p] == 0 {
		return func() {}
	}
	if len(z.deleting) >= maxDeleting {
		clear(z.deleting)
	}
	z.deleting[p] = struct{}{}
	return func() {
		z.mu.Lock()
		delete(z.deleting, p)
		z.mu.Unlock()
	}
}

// deletedHere reports, once, whether lock node p was deleted by a release
// through this instance (deleteHere).
func (z *ZooKeeper) deletedHere(p string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	_, ok := z.deleting[p]
	delete(z.deleting, p)
	return ok
}

func (z *ZooKeeper) watching(p string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.watched[p] > 0
}

// Leave deletes waiter's place in key's line. The waiter leaves without
// the lock, so a place that a claim or a handoff made its lock meanwhile
// is deleted too (leavePlace), and a handoff still on its way undoes
// itself (dropHanded). The waiter behind it, watching it, is woken.
func (z *ZooKeeper) Leave(ctx context.Context, key, waiter string) error {
	if err := z.usable(key); err != nil {
		return err
	}
	z.dropHanded(ctx, key, waiter)
	kids, err := z.children(ctx, z.dir(key))
	if err != nil {
		return err
	}
	dir, prefix := z.dir(key), placePrefix(waiter)
	var errs []error
	for _, c := range kids {
		if strings.HasPrefix(c.name, prefix) {
			errs = append(errs, z.leavePlace(ctx, key, dir+"/"+c.name, waiter))
		}
	}
	return errors.Join(errs...)
}

// leavePlace deletes place p of waiter id, which leaves its line without
// the lock: as created (version 0), or, if it became id's lock meanwhile,
// at the version read — nobody was told of that lock.
func (z *ZooKeeper) leavePlace(ctx context.Context, key, p, id string) error {
	if err := z.delete(ctx, p, 0); !errors.Is(err, zk.ErrBadVersion) {
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			z.forget(p)
			return nil
		}
		return err
	}
	n, err := z.get(ctx, p)
	switch {
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, ErrBadNode):
		return nil
	case err != nil:
		return err
	case !n.data.heldBy(id):
		return nil
	}
	if err := z.deleteAt(ctx, p, n.stat.Version); err != nil {
		return err
	}
	z.announce(key)
	return nil
}

// dropPlaces deletes the places of waiter id among key's nodes kids. The
// delete expects version 0: a place that became a lock stays.
func (z *ZooKeeper) dropPlaces(ctx context.Context, key string, kids []child, id string) error {
	dir, prefix := z.dir(key), placePrefix(id)
	var errs []error
	for _, c := range kids {
		if strings.HasPrefix(c.name, prefix) {
			errs = append(errs, z.dropPlace(ctx, dir+"/"+c.name))
		}
	}
	return errors.Join(errs...)
}

// discardPlace is dropPlace, retried while the session that made p lives.
func (z *ZooKeeper) discardPlace(p string) {
	z.retry(func(ctx context.Context) error { return z.dropPlace(ctx, p) })
}

// dropPlace deletes waiter place p, unless it has become a lock: the
// delete expects version 0, the place as created.
func (z *ZooKeeper) dropPlace(ctx context.Context, p string) error {
	switch err := z.delete(ctx, p, 0); {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		z.forget(p)
	case !errors.Is(err, zk.ErrBadVersion):
		return err
	}
	return nil
}
