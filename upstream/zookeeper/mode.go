package zookeeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
	"go.uber.org/zap"
)

// A lock's mode decides the node that may hold it: a lease's node is
// persistent, so that it outlives the instance that granted it; a
// connection-bound lock's node is ephemeral and this session's, so that it
// ends with the session whose timeout its validity is counted from. Every
// write of a lock's data goes through rewrite, which keeps that invariant
// (modeFits, the one place it is checked), and every grant checks it
// before it is made (acquisition.grant).

// ErrModeChange refuses to change a lock's mode when its node cannot be
// converted: the conversion's multi failed for a reason other than a race.
var ErrModeChange = errors.New("zookeeper: the lock's node could not be converted to its new mode")

// modeFits reports whether a node owned by owner (0: persistent) may hold
// a lock of mode for session: a lease a persistent node, a bound lock an
// ephemeral node of session itself.
func modeFits(mode engine.Mode, owner, session int64) bool {
	if mode == engine.Lease {
		return owner == 0
	}
	return owner != 0 && owner == session
}

// written is a lock node as a write left it.
type written struct {
	path    string
	fence   int64
	version int32
	owner   int64 // the session that owns it; 0: persistent
}

// rewrite writes d, token's lock, into lock node n, read at
// n.stat.Version. When n fits d's mode (modeFits) it is written in place;
// else it is converted — deleted and made again at its sequence (converted)
// as the node d's mode needs, with its fence, in one multi checked against
// the version read. errAgain: n changed meanwhile, read it again. d
// carries n's fence, whichever node holds it. A write whose reply is lost
// may have landed — shortened the lease, or tied it to this session — so
// it is an unknown outcome of op (lostWrite), never "nothing changed".
func (z *ZooKeeper) rewrite(ctx context.Context, op, key, token string, n lockNode, d zkData) (written, error) {
	session := z.conn.SessionID()
	d.Fence = n.fence()
	if modeFits(d.Mode, n.stat.EphemeralOwner, session) {
		stat, err := z.set(ctx, n.path, d, n.stat.Version)
		if err != nil {
			return written{}, lostWrite(op, raced(err))
		}
		return written{path: n.path, fence: d.Fence, version: stat.Version, owner: stat.EphemeralOwner}, nil
	}
	if err := ctx.Err(); err != nil { // the caller is gone: move nothing for it
		return written{}, err
	}
	ops := z.convertOps(n.path, n.stat.Version, d)
	target := ops[1].(*zk.CreateRequest).Path
	res, err := zkCall(ctx, z, func() ([]zk.MultiResponse, error) { return z.batch.multi(ops...) })
	if err = multiDone(ops, res, err); err != nil {
		if mayHaveLanded(err) || errors.Is(err, context.Canceled) { // sent: its caller gone, it may still land
			z.disown(key, token, target)
			z.spawn(func() { z.adoptLock(key, token, target) })
		}
		return written{}, lostWrite(op, converting(raced(err)))
	}
	z.forget(n.path)
	w := written{path: target, fence: d.Fence}
	if d.Mode != engine.Lease {
		w.owner = session
	}
	return w, nil
}

// mayHaveLanded reports whether a write that failed with err may have been
// carried out: its reply was lost, or not waited for.
func mayHaveLanded(err error) bool {
	return unknownOutcome(err) || errors.Is(err, context.DeadlineExceeded)
}

// lostWrite is err, the error of a write of an existing lock for op
// ("acquire", "extend", "release"), as an unknown outcome when the write
// may have landed.
func lostWrite(op string, err error) error {
	if mayHaveLanded(err) {
		return &engine.UnknownOutcomeError{Op: op, Silent: 1, Err: err}
	}
	return err
}

// raced turns the errors of a write that lost a race into errAgain.
func raced(err error) error {
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
		return errAgain
	}
	return err
}

// converting names a conversion's error, unless it is a race or a passing
// one (unavailable, a deadline), as ErrModeChange.
func converting(err error) error {
	switch {
	case errors.Is(err, errAgain):
		return err
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), passing(err):
		return zkErr("convert", "lock node", err)
	}
	return fmt.Errorf("%w: %w", ErrModeChange, err)
}

// convertOps are the ops of a multi that replaces lock node p, at version,
// by the node that lock d needs (modeFits): persistent for a lease,
// ephemeral for a bound lock, at p's sequence. d.Fence must carry p's fence.
func (z *ZooKeeper) convertOps(p string, version int32, d zkData) []any {
	kind, flags := byte(kindLease), int32(0)
	if d.Mode != engine.Lease {
		kind, flags = kindBound, zk.FlagEphemeral
	}
	return []any{
		&zk.DeleteRequest{Path: p, Version: version},
		&zk.CreateRequest{Path: converted(p, kind), Data: d.encode(), Acl: z.opts.ACL, Flags: flags},
	}
}

// disown records that bound lock node p of key, which a call moved into
// this session for token (against, or a conversion whose reply was lost),
// is held by nobody here: the call's caller was gone, and its holder is
// the retry that the call came too late for, through another instance.
// Close parks it.
func (z *ZooKeeper) disown(key, token, p string) {
	if p == "" {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.orphans[p] = zkLock{key, token}
}

// claim records that lock node p is held through this instance: a grant
// or a renewal here answered for it.
func (z *ZooKeeper) claim(p string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.orphans, p)
}

// park makes token's bound lock node p of key, which this session owns
// and nobody here holds (disown), a lease that outlives the session that
// Close is about to end: deleting it would take the key from its holder,
// the retry through another instance, within the validity it was told —
// never more than the session timeout for a bound lock (guaranteed),
// counted from before now. The lease lasts that long from now, unless its
// holder's renewal makes it bound again first (extended); it keeps its
// fence. The conversion is checked against the version read: a renewal
// that moved it back meanwhile wins.
func (z *ZooKeeper) park(key, token, p string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(dropWithin, z.opts.SessionTimeout))
	defer cancel()
	n, err := z.get(ctx, p)
	if err != nil || !n.data.heldBy(token) || n.data.Mode == engine.Lease || n.stat.EphemeralOwner != z.conn.SessionID() {
		return
	}
	d := n.data
	d.Mode, d.Parked, d.By, d.Fence = engine.Lease, true, z.id, n.fence()
	timeout, _ := z.sessionTimeout()
	d = d.lasts(z.wall(), max(timeout, z.opts.SessionTimeout))
	if err := z.multiOps(ctx, z.convertOps(p, n.stat.Version, d)); err != nil {
		z.log.Warn("a bound lock held through another instance could not be parked; closing the session deletes it",
			zap.String("key", key), zap.Error(err))
	}
}
