package quorum

import (
	"context"
	"errors"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Acquire takes key on a majority of nodes and gives it a fencing token.
//
// Phase one sets the key on every node where it is free and reads each
// node's fencing counter in the same script. Phase two commits the fence,
// max(counter)+1, to every node: it raises each counter and succeeds only
// where the token still holds the key. The grant needs a quorum in both
// phases and a positive validity; otherwise every node is rolled back.
// README.md ("Fencing tokens") explains why the fence strictly increases.
func (r *Redlock) Acquire(ctx context.Context, key string, h engine.Hold) (engine.Grant, error) {
	start := time.Now()
	fence, claimed, err := r.claim(ctx, key, h)
	if err == nil {
		err = r.commit(ctx, key, h.Token, fence)
	}
	if err == nil {
		if v := r.validity(h.TTL, start); v > 0 {
			r.settle(key, h.Token, claimed)
			return engine.Grant{Token: h.Token, Fence: fence, Validity: v}, nil
		}
		err = engine.ErrNotAcquired
	}
	claimed.Wait() // an acquire still in flight must not land after the rollback
	r.rollback(ctx, key, h.Token)
	return engine.Grant{}, err
}

// claim runs phase one and returns the fence to commit and the flight of
// its calls.
func (r *Redlock) claim(ctx context.Context, key string, h engine.Hold) (fence int64, calls *flight, err error) {
	t := newTally(r.quorum, len(r.nodes))
	var counter, held int64
	calls, err = fanout(ctx, r.nodes, r.cfg.NodeTimeout,
		func(ctx context.Context, n Node) (Claim, error) { return n.Acquire(ctx, key, h) },
		func(res result[Claim]) bool {
			t.add(res.val.State != Taken, res.err)
			counter = max(counter, res.val.Counter)
			if res.val.State == Mine {
				held = max(held, res.val.Fence)
			}
			return t.decided()
		})
	if err == nil {
		err = t.outcome("acquire", engine.ErrNotAcquired)
	}
	if err != nil {
		return 0, calls, err
	}
	// A retry by the holder keeps its fence, unless a later grant raised a
	// counter past it: then the token lapsed and this is a new grant.
	if held > 0 && held >= counter {
		return held, calls, nil
	}
	return counter + 1, calls, nil
}

// commit runs phase two.
func (r *Redlock) commit(ctx context.Context, key, token string, fence int64) error {
	t := newTally(r.quorum, len(r.nodes))
	_, err := fanout(ctx, r.nodes, r.cfg.NodeTimeout,
		func(ctx context.Context, n Node) (bool, error) { return n.Commit(ctx, key, token, fence) },
		func(res result[bool]) bool { t.add(res.val, res.err); return t.decided() })
	if err != nil {
		return err
	}
	return t.outcome("acquire", engine.ErrNotAcquired)
}

// rollback releases token's key on every node, waiting for all of them.
func (r *Redlock) rollback(ctx context.Context, key, token string) {
	ctx, cancel := r.cleanup(ctx)
	defer cancel()
	calls, _ := fanout(ctx, r.nodes, r.cfg.NodeTimeout,
		func(ctx context.Context, n Node) (bool, error) { return n.Release(ctx, key, token) },
		func(result[bool]) bool { return false })
	calls.Wait()
}

// Extend resets the lease of key held by token on a majority of nodes; a
// zero ttl reuses the lease the lock was last given. The validity counts
// from the shortest lease a majority applied.
func (r *Redlock) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	start := time.Now()
	t := newTally(r.quorum, len(r.nodes))
	applied := time.Duration(0)
	_, err := fanout(ctx, r.nodes, r.cfg.NodeTimeout,
		func(ctx context.Context, n Node) (time.Duration, error) { return n.Extend(ctx, key, token, ttl, mode) },
		func(res result[time.Duration]) bool {
			t.add(res.val > 0, res.err)
			if res.val > 0 && (applied == 0 || res.val < applied) {
				applied = res.val
			}
			return t.decided()
		})
	if err == nil {
		err = t.outcome("extend", engine.ErrNotHeld)
	}
	if err != nil {
		return 0, err
	}
	if v := r.validity(applied, start); v > 0 {
		return v, nil
	}
	return 0, engine.ErrNotHeld
}

// Release deletes key held by token on every node; it reports true when a
// majority still held it for token.
func (r *Redlock) Release(ctx context.Context, key, token string) (bool, error) {
	r.landed(key, token)
	t := newTally(r.quorum, len(r.nodes))
	_, err := fanout(ctx, r.nodes, r.cfg.NodeTimeout,
		func(ctx context.Context, n Node) (bool, error) { return n.Release(ctx, key, token) },
		func(res result[bool]) bool { t.add(res.val, res.err); return t.decided() })
	if err == nil {
		err = t.outcome("release", engine.ErrNotHeld)
	}
	if errors.Is(err, engine.ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
}
