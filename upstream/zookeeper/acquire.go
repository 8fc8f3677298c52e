package zookeeper

import (
	"context"
	"errors"
	"path"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
	"go.uber.org/zap"
)

// errAgain makes a step of an acquire look at the key's nodes again: one
// of them changed between two reads.
var errAgain = errors.New("zookeeper: lock nodes changed; read again")

// errTooLate refuses a grant that came after its own lease had run out.
var errTooLate = errors.New("zookeeper: answered after the lease ran out")

// Acquire takes key for h; see ZooKeeper for the layout. It is refused
// at once (ErrNotConnected) without a session.
//
// Without h.Waiter it tries once: it creates a node and keeps it if it is
// the lowest, else deletes it and returns a BusyError. With h.Waiter, the
// waiter has one place in line across its calls, made on the first: once
// the place is lowest it becomes the lock; until then it watches the node
// just before it, whose deletion calls Events.Released. The token that holds
// key gets it again with the same fence, its node's data rewritten (an
// idempotent retry), unless h.Fresh.
//
// The place lasts Waiter.Keep after the waiter's last call ended, and does
// not end while a call of the waiter is under way here (arrive, tried): a
// call slowed by ZooKeeper does not cost the waiter its place in line.
//
// ZooKeeper's sequence orders the line, so Waiter.Since is not used, and
// h.Next, this instance's next waiter, needs no place in the same step: it
// gets one in the background once the grant is made, unless it has one
// (a handoff makes it), so that a release through any instance wakes it
// without waiting for its retry timer.
//
// A node that the call made and does not hand over — the caller's ctx
// ended, a step failed — is deleted, in the background if need be.
func (z *ZooKeeper) Acquire(ctx context.Context, key string, h engine.Hold) (engine.Grant, error) {
	if err := z.usable(key); err != nil {
		return engine.Grant{}, err
	}
	if h.TTL <= 0 {
		return engine.Grant{}, errors.New("zookeeper: a lock needs a positive TTL")
	}
	if h.Mode == "" {
		h.Mode = engine.Lease
	}
	if h.Waiter != nil {
		z.arrive(key, h.Waiter.ID)
		defer z.tried(key, h.Waiter.ID, h.Waiter.Keep)
	}
	a := &acquisition{z: z, key: key, dir: z.dir(key), h: h, start: time.Now()}
	g, err := a.run(ctx)
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, engine.ErrOutcomeUnknown) { // the caller is gone: keep nothing for it
		err, a.kept = cerr, ""
	}
	a.cleanup(ctx, err == nil)
	if err != nil {
		a.z.disown(a.key, a.h.Token, a.moved)
		return engine.Grant{}, err
	}
	// The next waiter's place may be made already, by the grant's multi.
	if h.Next != nil && !z.hasPlace(key, h.Next.ID) {
		next := *h.Next
		z.spawn(func() { z.queue(key, next) })
	}
	return g, nil
}

// acquisition is one Acquire call.
type acquisition struct {
	z     *ZooKeeper
	key   string
	dir   string // key's container node
	h     engine.Hold
	start time.Time // validity counts from here

	created string // the node this call created, if any
	version int32  // the container's version created's create left
	czxid   int64  // created's creation zxid
	kept    string // the waiter's place, kept in line
	// onBehalf: the call puts a waiter in line for it (queue), not the
	// waiter's own call.
	onBehalf bool
	mine     string // the node this call made the lock
	// mineVersion is mine's version as this call left it: a retry of the
	// same token through another instance that rewrote it since owns it.
	mineVersion int32
	// moved is the node of a bound lock of the same token that the call
	// moved into this session (against): should the call fail after all,
	// nobody here holds it (disown).
	moved string
}

func (a *acquisition) run(ctx context.Context) (engine.Grant, error) {
	if a.h.Waiter != nil {
		return a.wait(ctx)
	}
	return a.tryOnce(ctx)
}

// cleanup deletes the nodes the call leaves behind: the one it created,
// unless kept as the lock or a place, and the lock it made if the call
// failed after all.
func (a *acquisition) cleanup(ctx context.Context, granted bool) {
	if !granted && a.mine != "" {
		a.z.drop(ctx, a.mine, a.mineVersion)
	}
	if c := a.created; c != "" && c != a.kept && c != a.mine {
		a.z.drop(ctx, c, 0)
	}
}

// holdData is what a node holding the lock for h says.
func (a *acquisition) holdData() zkData {
	return zkData{Token: a.h.Token, Mode: a.h.Mode, Name: a.h.Name, By: a.z.id}.lasts(a.z.wall(), a.h.TTL)
}

// tryOnce creates a node and keeps it if it is the lowest.
func (a *acquisition) tryOnce(ctx context.Context) (engine.Grant, error) {
	session := a.z.conn.SessionID()
	d := a.holdData()
	c, err := a.create(ctx, a.h.Token, kindTry, d)
	if err != nil {
		return engine.Grant{}, err
	}
	if c.alone { // the only node, so the lowest: no listing needed
		return a.own(c, d, session)
	}
	for range maxRounds {
		kids, err := a.z.children(ctx, a.dir)
		if err != nil {
			return engine.Grant{}, err
		}
		var g engine.Grant
		switch i := indexOf(kids, path.Base(c.path)); i {
		case -1: // deleted under us: a release by the same token
			return engine.Grant{}, a.z.busy(lockNode{})
		case 0:
			g, err = a.own(c, d, session)
		default:
			g, err = a.against(ctx, a.dir+"/"+kids[0].name)
		}
		if !errors.Is(err, errAgain) {
			return g, err
		}
	}
	return engine.Grant{}, errContended
}

// own grants the lock held by c, the lowest node, which this call created
// with data d in session: the node is this session's if the session has
// not changed since (session IDs never come back), or a lease's, which no
// session owns, and its creation zxid is the fence.
func (a *acquisition) own(c created, d zkData, session int64) (engine.Grant, error) {
	if nodeFlags(d)&zk.FlagEphemeral == 0 { // a lease: no session owns it
		session = 0
	}
	return a.grant(written{path: c.path, fence: c.czxid, owner: session}, d, true)
}

// against answers for p, the lowest node, which this call did not make:
// if h.Token holds the lock there, the lock is granted again with the same
// fence and its data rewritten; if p is a lease overdue, whoever made it,
// it is ended (reap) and the nodes read again; else the call is refused.
func (a *acquisition) against(ctx context.Context, p string) (engine.Grant, error) {
	top, err := a.z.get(ctx, p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return engine.Grant{}, errAgain
	case err != nil:
		return engine.Grant{}, err
	case a.z.overdue(top):
		return engine.Grant{}, a.z.reap(ctx, a.key, top)
	case !top.data.heldBy(a.h.Token) || a.h.Fresh:
		return engine.Grant{}, a.z.busy(top)
	}
	d := a.holdData()
	d.Fence = top.fence()
	w, err := a.z.rewrite(ctx, "acquire", a.key, a.h.Token, top, d)
	if err != nil {
		return engine.Grant{}, err
	}
	if w.path != top.path && w.owner != 0 {
		a.moved = w.path
	}
	return a.grant(w, d, false)
}

// grant is the lock held by node w with data d. The node must fit d's
// mode for this session (modeFits): a bound lock's node is this session's,
// else the session expired meanwhile and the node is gone. made says this
// call made w the lock: should the call fail after all, cleanup deletes
// it, at the version it left. The validity counts from before the call's
// first request was sent.
func (a *acquisition) grant(w written, d zkData, made bool) (engine.Grant, error) {
	if !modeFits(d.Mode, w.owner, a.z.conn.SessionID()) || !a.z.track(a.key, a.h.Token, w.path, w.owner, d) {
		return engine.Grant{}, ErrNotConnected
	}
	a.z.claim(w.path)
	if made {
		a.mine, a.mineVersion = w.path, w.version
	}
	v := a.z.guaranteed(a.h.Mode, a.h.TTL) - time.Since(a.start)
	if v <= 0 {
		return engine.Grant{}, errTooLate
	}
	return engine.Grant{Token: a.h.Token, Fence: w.fence, Validity: v}, nil
}

// busy refuses an acquire while n holds the key. RetryAfter is how long
// until this instance may end the holder's lease (dueIn), or the session
// timeout when there is none to go by: a waiter's place about to take
// the key, or a connection-bound lock that ran out and that its owner
// has yet to delete.
func (z *ZooKeeper) busy(n lockNode) error {
	after := z.opts.SessionTimeout
	if !n.data.waiting() {
		if left := z.dueIn(n); left > 0 {
			after = left
		}
	}
	return &engine.BusyError{RetryAfter: after}
}

// overdue reports whether lock node n is a lease this instance may end,
// by its own clock (dueIn). A connection-bound lock is ended only by its
// own session's instance (its timer) or by the session's end.
func (z *ZooKeeper) overdue(n lockNode) bool {
	return n.data.Mode == engine.Lease && z.dueIn(n) <= 0
}

// reap ends overdue lease n of key, whichever instance granted it: a
// delete checked against the version read, so an extension that lands
// meanwhile wins. It returns errAgain, for the caller to read the nodes
// again, unless ZooKeeper failed.
func (z *ZooKeeper) reap(ctx context.Context, key string, n lockNode) error {
	switch err := z.delete(ctx, n.path, n.stat.Version); {
	case err == nil:
		z.forget(n.path)
		z.log.Info("lease ran out; lock deleted", zap.String("key", key), zap.Time("expires_at", n.data.expiry()))
		return errAgain
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
		return errAgain
	default:
		return err
	}
}

// wanted is the lock a waiter asks for, as a handoff writes it; no Mode
// when the waiter does not say.
func wanted(token string, ttl time.Duration, mode engine.Mode, name string) zkData {
	if mode == "" || ttl <= 0 {
		return zkData{}
	}
	return zkData{Token: token, Mode: mode, Name: name, TTL: millis(ttl)}
}

// create creates a node of kind for id in key's container, making the
// container first if it is missing.
func (a *acquisition) create(ctx context.Context, id string, kind byte, d zkData) (created, error) {
	prefix := a.dir + "/" + nodePrefix(id, kind)
	for range maxRounds {
		c, err := a.z.createSeq(ctx, a.dir, prefix, d)
		if !errors.Is(err, zk.ErrNoNode) {
			if err == nil {
				a.created, a.version, a.czxid = c.path, c.version, c.czxid
				if a.z.afterCreate != nil {
					a.z.afterCreate(c.path)
				}
			}
			return c, err
		}
		if err := a.z.makeDir(ctx, a.dir); err != nil {
			return created{}, err
		}
	}
	return created{}, errContended
}
