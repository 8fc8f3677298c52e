package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
)

// maxRounds bounds the re-reads of a call that races with other changes
// to the same key.
const maxRounds = 5

// errContended ends a call whose key changed under it maxRounds times.
var errContended = errors.New("zookeeper: the lock nodes kept changing; try again")

// zkCall runs f — a go-zookeeper request, which takes no context — and
// waits for it or for ctx. A request left behind finishes on its own: the
// connection answers or fails each one within its receive timeout (2/3 of
// the session timeout), and Close fails them all.
//
// A ctx without a deadline (a client's connection, which may close), or
// with one further off than that (z.races), is not raced: f runs on the
// caller's goroutine and its answer is returned, for the caller to weigh
// against ctx. This saves handing each request to a goroutine and its
// answer back, which on a lightly loaded server costs more than the
// request.
func zkCall[T any](ctx context.Context, z *ZooKeeper, f func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if !z.races(ctx) {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// races reports whether a request made for ctx is raced against ctx's
// deadline: only when the deadline may come before go-zookeeper answers
// or fails the request by itself, which it does within the connection's
// receive timeout, 2/3 of the session timeout (negotiated, or asked if
// longer); a margin of 1/12 is added. A cleanup step's ctx
// (cleanupCtx), bounded by the session timeout, is not raced. Without a
// session, a bounded ctx is always raced: a request made while
// go-zookeeper dials again waits, unsent, for the new connection's
// handshake, which it lets take ten receive timeouts (a paused server).
func (z *ZooKeeper) races(ctx context.Context) bool {
	deadline, bounded := ctx.Deadline()
	if !bounded {
		return false
	}
	if z.conn.State() != zk.StateHasSession {
		return true
	}
	timeout, _ := z.sessionTimeout()
	return time.Until(deadline) < max(timeout, z.opts.SessionTimeout)*3/4
}

// zkErr names the operation and node of a ZooKeeper error; errors.Is still
// sees go-zookeeper's sentinels. A connection error is marked unavailable.
func zkErr(op, p string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	err = fmt.Errorf("zookeeper: %s %s: %w", op, p, err)
	if passing(err) {
		return unavailable{err}
	}
	return err
}

// passing reports whether err is go-zookeeper's word for a connection or
// session that is going away, which reconnection ends.
func passing(err error) bool {
	for _, e := range []error{zk.ErrConnectionClosed, zk.ErrNoServer, zk.ErrSessionExpired, zk.ErrSessionMoved} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// children lists dir's lock nodes, lowest first; none if dir is missing.
func (z *ZooKeeper) children(ctx context.Context, dir string) ([]child, error) {
	names, err := zkCall(ctx, z, func() ([]string, error) {
		names, _, err := z.conn.Children(dir)
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return parseChildren(names), zkErr("children", dir, err)
}

// get reads a lock node.
func (z *ZooKeeper) get(ctx context.Context, p string) (lockNode, error) {
	n := lockNode{path: p}
	b, err := zkCall(ctx, z, func() ([]byte, error) {
		b, stat, err := z.conn.Get(p)
		n.stat = stat
		return b, err
	})
	if err != nil {
		return lockNode{}, zkErr("get", p, err)
	}
	if err := json.Unmarshal(b, &n.data); err != nil || n.data.Token == "" {
		return lockNode{}, fmt.Errorf("%w: %s", ErrBadNode, p)
	}
	return n, nil
}

// set writes a lock node's data if its version is version (-1: any).
func (z *ZooKeeper) set(ctx context.Context, p string, d zkData, version int32) (*zk.Stat, error) {
	stat, err := zkCall(ctx, z, func() (*zk.Stat, error) { return z.conn.Set(p, d.encode(), version) })
	return stat, zkErr("set", p, err)
}

// deleteLock deletes lock node p, batched with other writes (batcher).
func (z *ZooKeeper) deleteLock(ctx context.Context, p string) error {
	_, err := zkCall(ctx, z, func() (struct{}, error) {
		res, err := z.batch.multi(&zk.DeleteRequest{Path: p, Version: -1})
		return struct{}{}, multiErr(res, err, 1)
	})
	return zkErr("delete", p, err)
}

// delete deletes a node if its version is version (-1: any).
func (z *ZooKeeper) delete(ctx context.Context, p string, version int32) error {
	_, err := zkCall(ctx, z, func() (struct{}, error) { return struct{}{}, z.conn.Delete(p, version) })
	return zkErr("delete", p, err)
}

// read lists key's lock nodes in dir and reads the lowest one.
func (z *ZooKeeper) read(ctx context.Context, dir string) (view, error) {
	for range maxRounds {
		kids, err := z.children(ctx, dir)
		if err != nil || len(kids) == 0 {
			return view{}, err
		}
		top, err := z.get(ctx, dir+"/"+kids[0].name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		return view{kids: kids, top: top}, err
	}
	return view{}, errContended
}

// holder reads key's lock, which token must hold, else ErrNotHeld (with
// the nodes read). Another session may read from a server that lags: a
// "not held" is confirmed after a sync with the leader. A lock that this
// instance knows has run out (dueIn) is not held, as a Redis key past its
// TTL, though nobody has deleted its node yet.
func (z *ZooKeeper) holder(ctx context.Context, key, token string) (view, error) {
	dir := z.dir(key)
	v, err := z.read(ctx, dir)
	if err == nil && !v.top.data.heldBy(token) {
		if err = z.sync(ctx, dir); err == nil {
			v, err = z.read(ctx, dir)
		}
	}
	switch {
	case err != nil:
		return view{}, err
	case !v.held() || !v.top.data.heldBy(token), z.dueIn(v.top) <= 0:
		return v, engine.ErrNotHeld
	}
	return v, nil
}

// sync makes the server this session reads from catch up with the leader.
func (z *ZooKeeper) sync(ctx context.Context, p string) error {
	_, err := zkCall(ctx, z, func() (string, error) { return z.conn.Sync(p) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return zkErr("sync", p, err)
}

// createSeq creates an ephemeral sequential node named prefix + sequence
// and returns its path and creation zxid, learnt in the same request: a
// multi that creates the node and rewrites the (unused) data of dir, its
// parent, whose new mzxid is the multi's zxid — the node's czxid. The
// parent's stat also says whether the node was its only child right after
// the create (ZooKeeper applies a multi as one transaction): then it is the
// lowest, with no listing needed.
// A node whose creation the caller does not learn of — ctx ended, or the
// connection failed before the answer — is deleted in the background, as
// created only (sweep); a lock's create whose answer the connection lost
// is an unknown outcome (lostCreate).
func (z *ZooKeeper) createSeq(ctx context.Context, dir, prefix string, d zkData) (created, error) {
	answered := func(r created) (created, error) {
		unknown := unknownOutcome(r.err)
		if unknown {
			z.spawn(func() { z.sweep(prefix) })
		}
		r.err = zkErr("create", prefix, r.err)
		if unknown && !d.waiting() {
			r.err = lostCreate(r.err)
		}
		return r, r.err
	}
	if err := ctx.Err(); err != nil {
		return created{}, err
	}
	if !z.races(ctx) { // as zkCall: the caller weighs ctx
		return answered(z.multiCreateHooked(dir, prefix, d))
	}
	done := make(chan created, 1)
	go func() { done <- z.multiCreateHooked(dir, prefix, d) }()
	select {
	case r := <-done:
		return answered(r)
	case <-ctx.Done():
		z.spawn(func() { z.abandon(<-done, prefix) })
		return created{}, ctx.Err()
	}
}

// multiCreateHooked is multiCreate, then the createReturned test hook.
func (z *ZooKeeper) multiCreateHooked(dir, prefix string, d zkData) created {
	r := z.multiCreate(dir, prefix, d)
	if r.err == nil && z.createReturned != nil {
		z.createReturned(r.path)
	}
	return r
}

// multiCreate runs createSeq's multi. Its error is the failing op's.
func (z *ZooKeeper) multiCreate(dir, prefix string, d zkData) created {
	ops := z.createOps(dir, prefix, d)
	res, err := z.batch.multi(ops...)
	if err = multiDone(ops, res, err); err != nil {
		return created{err: err}
	}
	return created{path: res[0].String, czxid: res[1].Stat.Mzxid, version: res[1].Stat.Version, alone: res[1].Stat.NumChildren == 1}
}

// createOps are the ops of a multi that creates a sequential node, named
// prefix + sequence, in dir, and rewrites dir's (unused) data; createSeq
// says why. The node is ephemeral — it ends with the session — unless it
// holds a lease (nodeFlags).
func (z *ZooKeeper) createOps(dir, prefix string, d zkData) []any {
	return []any{
		&zk.CreateRequest{Path: prefix, Data: d.encode(), Acl: z.opts.ACL, Flags: nodeFlags(d)},
		&zk.SetDataRequest{Path: dir, Version: -1},
	}
}

// nodeFlags are the create flags of a node holding d. A lease outlives
// the instance that granted it, as on Redis: its node is persistent, and
// any instance deletes it once it is overdue. A connection-bound lock and
// a waiter's place are ephemeral: they end with the session.
func nodeFlags(d zkData) int32 {
	if d.Mode == engine.Lease {
		return zk.FlagSequence
	}
	return zk.FlagEphemeral | zk.FlagSequence
}

// promoteOps are the ops of a multi that makes lock node or place p, at
// version, the lease d: p is deleted and its promoted node, persistent,
// created in its place in line (convertOps). d.Fence must carry p's fence.
func (z *ZooKeeper) promoteOps(p string, version int32, d zkData) []any {
	d.Mode = engine.Lease
	return z.convertOps(p, version, d)
}

// multiDone is the error of a multi of ops, as multiErr, or an error if a
// set among them answered without the stat its caller reads.
func multiDone(ops []any, res []zk.MultiResponse, err error) error {
	if err = multiErr(res, err, len(ops)); err != nil {
		return err
	}
	for i, op := range ops {
		if _, isSet := op.(*zk.SetDataRequest); isSet && res[i].Stat == nil {
			return errors.New("zookeeper: a multi's set answered without a stat")
		}
	}
	return nil
}

// multiErr is the error of a multi of n ops: the request's, or the first
// failing op's.
func multiErr(res []zk.MultiResponse, err error, n int) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	if len(res) != n {
		return errors.New("zookeeper: a multi answered with the wrong number of results")
	}
	return nil
}

// created is the outcome of a create.
type created struct {
	path    string
	czxid   int64
	version int32 // the parent's data version the create left (placeFacts)
	alone   bool  // the node was its parent's only child when created
	err     error
}

// abandon deletes the node a create left behind, if it made one.
func (z *ZooKeeper) abandon(r created, prefix string) {
	switch {
	case r.err == nil:
		z.discard(r.path, 0) // as created: a retry through another instance may have taken it since
	case unknownOutcome(r.err):
		z.sweep(prefix)
	}
}

// lostCreate is the error of a lock's create whose reply was lost: the
// node may have been made, and a retry of its token through any instance
// takes it (against), so the outcome is unknown — never "not granted".
// The node is swept meanwhile, as created only (sweep).
func lostCreate(err error) error {
	return &engine.UnknownOutcomeError{Op: "acquire", Silent: 1, Err: err}
}

// unknownOutcome reports whether a failed request may have been carried
// out: the connection broke after it was sent.
func unknownOutcome(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed)
}

// makeDir creates key's container node dir, and the root if missing.
func (z *ZooKeeper) makeDir(ctx context.Context, dir string) error {
	err := z.createContainer(ctx, dir)
	if errors.Is(err, zk.ErrNoNode) {
		if err = z.makeRoot(ctx); err == nil {
			err = z.createContainer(ctx, dir)
		}
	}
	return err
}

// createContainer creates a container node unless it exists.
func (z *ZooKeeper) createContainer(ctx context.Context, dir string) error {
	_, err := zkCall(ctx, z, func() (string, error) {
		return z.conn.CreateContainer(dir, nil, zk.FlagContainer, z.opts.ACL)
	})
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return zkErr("create container", dir, err)
}

// makeRoot creates the root node and its parents, as persistent nodes.
func (z *ZooKeeper) makeRoot(ctx context.Context) error {
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(z.opts.Root, "/"), "/") {
		p = path.Join("/", p, part)
		_, err := zkCall(ctx, z, func() (string, error) { return z.conn.Create(p, nil, 0, z.opts.ACL) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return zkErr("create", p, err)
		}
	}
	return nil
}
