package upstream

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/engine"
)

// Extend resets the lease of key held by token to ttl from now — a zero
// ttl reuses the stored ttl_ms — and records mode unless it is empty. Mode
// Bound, the watchdog's renewal, fails with ErrNotBound once the lock is
// a lease. The write is version-checked; the instance that owns the node
// re-arms its timer, here or when the old deadline comes.
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
		d, err := extended(v.top.data, ttl, mode)
		if err != nil {
			return 0, err
		}
		stat, err := z.set(ctx, v.top.path, d, v.top.stat.Version)
		switch {
		case err == nil:
			z.track(key, token, v.top.path, stat.EphemeralOwner, d)
			return d.ttl() - time.Since(start), nil
		case errors.Is(err, zk.ErrNoNode):
			return 0, engine.ErrNotHeld
		case !errors.Is(err, zk.ErrBadVersion):
			return 0, err
		}
	}
	return 0, errContended
}

// extended is lock data d with its lease reset to ttl (zero: d's own) and
// its mode set to mode (empty: d's own).
func extended(d zkData, ttl time.Duration, mode engine.Mode) (zkData, error) {
	if mode == engine.Bound && d.Mode == engine.Lease {
		return d, engine.ErrNotBound
	}
	if mode != "" {
		d.Mode = mode
	}
	if ttl <= 0 {
		ttl = d.ttl()
	}
	return d.lasts(ttl), nil
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
		switch err := z.deleteLock(ctx, p); {
		case err == nil:
			z.forget(p)
			return true, nil
		case !errors.Is(err, zk.ErrNoNode):
			undo()
			return false, err
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
		switch err := z.delete(ctx, v.top.path, v.top.stat.Version); {
		case err == nil:
			z.forget(v.top.path)
			_ = z.dropPlaces(ctx, key, v.kids[1:], token) // best effort: places expire
			return true, nil
		case errors.Is(err, zk.ErrNoNode):
			return false, nil
		case !errors.Is(err, zk.ErrBadVersion):
			return false, err
		}
	}
	return false, errContended
}

// Leave deletes waiter's place in key's line, unless it has become the
// lock — but a lock handed to the waiter and not taken is released. The
// waiter behind it, watching it, is woken.
func (z *ZooKeeper) Leave(ctx context.Context, key, waiter string) error {
	if err := z.usable(key); err != nil {
		return err
	}
	z.dropHanded(ctx, key, waiter)
	kids, err := z.children(ctx, z.dir(key))
	if err != nil {
		return err
	}
	return z.dropPlaces(ctx, key, kids, waiter)
}

// dropPlaces deletes the places of waiter id among key's nodes kids. The
// delete expects version 0: a place that became a lock stays.
func (z *ZooKeeper) dropPlaces(ctx context.Context, key string, kids []child, id string) error {
	dir, prefix := z.dir(key), placePrefix(id)
	var errs []error
	for _, c := range kids {
		if !strings.HasPrefix(c.name, prefix) {
			continue
		}
		p := dir + "/" + c.name
		switch err := z.delete(ctx, p, 0); {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			z.forget(p)
		case !errors.Is(err, zk.ErrBadVersion):
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Inspect reads key's lowest node: the fence is its creation zxid, the
// validity what is left of its lease (0 once it ran out, until its owner
// deletes it). A waiter's place that has not taken the key yet holds
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
	return engine.Holder{Token: d.Token, Fence: v.top.stat.Czxid, Validity: max(d.left(), 0), Mode: d.Mode, Name: d.Name}, true, nil
}
