package upstream

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/engine"
)

// A release through this instance hands the key straight to the
// instance's next waiter when that waiter's place stands just behind the
// lock node: one multi deletes the lock node and writes the waiter's lock
// into its place, which is the lowest node, and so the lock, from that
// transaction on. The waiter, woken by the engine, takes the grant without
// a request (handedOver). Otherwise the handoff takes a delete, the watch
// event, a listing and the waiter's write to its place.
//
// The order is ZooKeeper's: a place created after the lock node numbers
// higher, so nothing can come between the lock node and the place just
// behind it, and the place is the oldest waiter across every instance.

// handoff is a key handed to a waiter of this instance, kept until the
// waiter takes it.
type handoff struct {
	path    string
	fence   int64
	version int32 // the place's data version after the handoff's write
	data    zkData
}

var _ engine.EarlyReleaser = (*ZooKeeper)(nil)

// ReleaseThen is Release that hands key to next, this instance's first
// waiter for it, when it can; sent runs once the release is done.
func (z *ZooKeeper) ReleaseThen(ctx context.Context, key, token, next string, sent func()) (bool, error) {
	ok := z.handOver(ctx, key, token, next)
	var err error
	if !ok {
		ok, err = z.Release(ctx, key, token)
	}
	if ok && sent != nil {
		sent()
	}
	return ok, err
}

// handOver hands key, held by token through this instance, to waiter
// next, and reports whether it did. When it did not, nothing changed — or
// the outcome is unknown, and the waiter's place is looked after
// (adoptHanded) — and a plain Release follows.
func (z *ZooKeeper) handOver(ctx context.Context, key, token, next string) bool {
	if next == "" || z.usable(key) != nil {
		return false
	}
	lock, place, want, ok := z.handTarget(key, token, next)
	if !ok {
		return false
	}
	d := want.lasts(want.ttl())
	// The client's ctx does not cut the multi short: its outcome is needed.
	ctx, cancel := z.cleanupCtx(ctx)
	defer cancel()
	res, err := zkCall(ctx, func() ([]zk.MultiResponse, error) {
		return z.conn.Multi(
			&zk.DeleteRequest{Path: lock, Version: -1},
			&zk.SetDataRequest{Path: place, Data: d.encode(), Version: 0},
		)
	})
	err = multiErr(res, err, 2)
	if err != nil {
		if unknownOutcome(err) || errors.Is(err, context.DeadlineExceeded) {
			z.spawn(func() { z.adoptHanded(key, next, place) })
		}
		z.log.Debug("handoff not made; releasing", zap.String("key", key), zap.Error(err))
		return false
	}
	stat := res[1].Stat
	z.forget(lock)
	if !z.track(key, next, place, stat.EphemeralOwner, d) {
		return true // the session changed: the place, and the lock, went with it
	}
	z.mu.Lock()
	z.handed[zkLock{key, next}] = handoff{path: place, fence: stat.Czxid, version: stat.Version, data: d}
	z.mu.Unlock()
	return true
}

// handTarget finds what a handoff of key from token to waiter next needs:
// token's lock node, next's place just behind it, and the lock next wants.
func (z *ZooKeeper) handTarget(key, token, next string) (lock, place string, want zkData, ok bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	lock, place = z.locks[zkLock{key, token}], z.places[zkLock{key, next}]
	n := z.own[place]
	if lock == "" || place == "" || n == nil || n.held || n.ahead != lock || n.want.Mode == "" {
		return "", "", zkData{}, false
	}
	return lock, place, n.want, true
}

// adoptHanded looks after waiter next's place after a handoff whose
// outcome is unknown: if the handoff was made, the place is next's lock,
// and this instance enforces its lease as for any lock it made; next takes
// it on its next try (against).
func (z *ZooKeeper) adoptHanded(key, next, place string) {
	z.retry(func(ctx context.Context) error {
		n, err := z.get(ctx, place)
		switch {
		case errors.Is(err, zk.ErrNoNode), errors.Is(err, ErrZKBadNode):
			return nil
		case err != nil:
			return err
		case n.data.heldBy(next):
			z.track(key, next, place, n.stat.EphemeralOwner, n.data)
		}
		return nil
	})
}

// handedOver takes the key handed to the waiter, if it was, and the lock
// is as the waiter asks. Its validity ends at the expires_at written, the
// deadline of this instance's lease timer.
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
	v := h.data.left()
	if v <= 0 {
		return engine.Grant{}, false
	}
	a.mine = h.path // should the caller be gone, cleanup releases it
	return engine.Grant{Token: a.h.Token, Fence: h.fence, Validity: v}, true
}

// dropHanded releases a key handed to waiter id that it did not take.
func (z *ZooKeeper) dropHanded(ctx context.Context, key, id string) {
	z.mu.Lock()
	h, ok := z.handed[zkLock{key, id}]
	delete(z.handed, zkLock{key, id})
	z.mu.Unlock()
	if !ok {
		return
	}
	switch err := z.delete(ctx, h.path, h.version); {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		z.forget(h.path)
		z.announce(key)
	case !errors.Is(err, zk.ErrBadVersion): // the lease timer deletes it
		z.log.Debug("handed lock not released", zap.String("key", key), zap.Error(err))
	}
}
