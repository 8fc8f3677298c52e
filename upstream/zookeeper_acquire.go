package upstream

import (
	"context"
	"errors"
	"path"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/engine"
)

// errAgain makes a step of an acquire look at the key's nodes again: one
// of them changed between two reads.
var errAgain = errors.New("upstream: zookeeper: lock nodes changed; read again")

// errTooLate refuses a grant that came after its own lease had run out.
var errTooLate = errors.New("upstream: zookeeper answered after the lease ran out")

// Acquire takes key for h; see ZooKeeper for the layout. It is refused
// at once (ErrZKNotConnected) without a session.
//
// Without h.Waiter it tries once: it creates a node and keeps it if it is
// the lowest, else deletes it and returns a BusyError. With h.Waiter, the
// waiter has one place in line across its calls, made on the first: once
// the place is lowest it becomes the lock; until then it watches the node
// just before it, whose deletion calls Events.Released. The token that holds
// key gets it again with the same fence, its node's data rewritten (an
// idempotent retry), unless h.Fresh.
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
		return engine.Grant{}, errors.New("upstream: a lock needs a positive TTL")
	}
	if h.Mode == "" {
		h.Mode = engine.Lease
	}
	a := &acquisition{z: z, key: key, dir: z.dir(key), h: h, start: time.Now()}
	g, err := a.run(ctx)
	if cerr := ctx.Err(); cerr != nil { // the caller is gone: keep nothing for it
		err, a.kept = cerr, ""
	}
	a.cleanup(ctx, err == nil)
	if err != nil {
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
	kept    string // the waiter's place, kept in line
	mine    string // the node this call made the lock
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
		a.z.drop(ctx, a.mine)
	}
	if c := a.created; c != "" && c != a.kept && c != a.mine {
		a.z.drop(ctx, c)
	}
}

// holdData is what a node holding the lock for h says.
func (a *acquisition) holdData() zkData {
	return zkData{Token: a.h.Token, Mode: a.h.Mode, Name: a.h.Name}.lasts(a.h.TTL)
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
			return engine.Grant{}, a.z.busy(zkData{})
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
// not changed since (session IDs never come back), and its creation zxid
// is the fence.
func (a *acquisition) own(c created, d zkData, session int64) (engine.Grant, error) {
	return a.grant(c.path, c.czxid, session, d, true)
}

// against answers for p, the lowest node, which this call did not make:
// if h.Token holds the lock there, the lock is granted again with the same
// fence and its data rewritten; else the call is refused.
func (a *acquisition) against(ctx context.Context, p string) (engine.Grant, error) {
	top, err := a.z.get(ctx, p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return engine.Grant{}, errAgain
	case err != nil:
		return engine.Grant{}, err
	case !top.data.heldBy(a.h.Token) || a.h.Fresh:
		return engine.Grant{}, a.z.busy(top.data)
	}
	d := a.holdData()
	stat, err := a.z.set(ctx, p, d, top.stat.Version)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return engine.Grant{}, errAgain
	}
	if err != nil {
		return engine.Grant{}, err
	}
	return a.grant(p, stat.Czxid, stat.EphemeralOwner, d, false)
}

// grant is the lock held by node p, created at zxid fence by session
// owner, with data d. made says this call made p the lock: then this
// session must own it still, else the session expired meanwhile and the
// node is gone.
func (a *acquisition) grant(p string, fence, owner int64, d zkData, made bool) (engine.Grant, error) {
	if !a.z.track(a.key, a.h.Token, p, owner, d) && made {
		return engine.Grant{}, ErrZKNotConnected
	}
	if made {
		a.mine = p
	}
	v := a.h.TTL - time.Since(a.start)
	if v <= 0 {
		return engine.Grant{}, errTooLate
	}
	return engine.Grant{Token: a.h.Token, Fence: fence, Validity: v}, nil
}

// busy refuses an acquire while d holds the key. RetryAfter is the
// holder's lease left, or the session timeout when there is none to go by:
// a waiter's place about to take the key, or a lease that ran out and
// that its owner has yet to delete.
func (z *ZooKeeper) busy(d zkData) error {
	after := z.opts.SessionTimeout
	if left := d.left(); !d.waiting() && left > 0 {
		after = left
	}
	return &engine.BusyError{RetryAfter: after}
}

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
			a.z.drop(ctx, a.created)
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
	stat, err := a.claimWrite(ctx, p, d)
	switch {
	case err == nil:
		return a.grant(p, stat.Czxid, stat.EphemeralOwner, d, true)
	case errors.Is(err, zk.ErrBadVersion):
		return a.against(ctx, p)
	case errors.Is(err, zk.ErrNoNode):
		return engine.Grant{}, errAgain
	}
	return engine.Grant{}, err
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
	res, err := zkCall(ctx, func() ([]zk.MultiResponse, error) { return a.z.batch.multi(ops...) })
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
		a.z.drop(ctx, p)
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
	return g, err
}

// watchAhead watches the node before the waiter's place kids[i] and keeps
// the place; errAgain if that node is gone already.
func (a *acquisition) watchAhead(ctx context.Context, kids []child, i int) error {
	ok, err := a.z.watch(ctx, a.key, a.dir+"/"+kids[i-1].name)
	if err == nil && !ok {
		err = errAgain
	}
	if err == nil {
		a.keep(a.dir+"/"+kids[i].name, a.dir+"/"+kids[i-1].name)
	}
	return err
}

// keep keeps the waiter's place p in line for the waiter's Keep; ahead is
// the node just before it, "" if none.
func (a *acquisition) keep(p, ahead string) {
	a.kept = p
	f := placeFacts{ahead: ahead, want: wanted(a.h.Token, a.h.TTL, a.h.Mode, a.h.Name)}
	if p == a.created {
		f.version = a.version
	}
	a.z.keepPlace(a.key, a.h.Waiter.ID, p, a.h.Waiter.Keep, f)
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
				a.created, a.version = c.path, c.version
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

// queue gives waiter w of key a place in line, in the background after a
// grant (Hold.Next): its watch wakes it when the key is released through
// any instance. If the key is free already, it announces it.
func (z *ZooKeeper) queue(key string, w engine.Waiter) {
	ctx, cancel := z.cleanupCtx(context.Background())
	defer cancel()
	a := &acquisition{z: z, key: key, dir: z.dir(key), h: engine.Hold{Token: w.ID, TTL: w.TTL, Mode: w.Mode, Name: w.Name, Waiter: &w}}
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
			a.keep(a.dir+"/"+kids[0].name, "")
			a.z.announce(a.key)
			return nil
		}
		if err := a.watchAhead(ctx, kids, i); !errors.Is(err, errAgain) {
			return err
		}
	}
	return errContended
}
