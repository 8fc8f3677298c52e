package zookeeper

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/engine"
	"go.uber.org/zap"
)

// taker is the engine's side of a lock taken through another instance
// (engine.Engine.Taken): it tells the lock's holder, reason "deleted", if
// this instance granted it. Events that do not implement it hear nothing.
type taker interface{ Taken(key, token string) }

// A lease's node is persistent and no instance renews it, so nothing told
// the instance that granted one that a DEL through another instance took
// it. A bare deletion would not say it either: the holder releasing its
// own lock through another instance, with its token, and an instance
// ending an overdue lease, delete it too, and are no loss. So a delete
// that takes a lock from its holder (a DEL without the token,
// engine.Taking) leaves a mark in the same multi: an ephemeral node in the
// marks directory (marksDir) named after the lock node. Every instance
// keeps one watch on that directory — nothing per lock — and the instance
// that answers for the lock node tells its engine (Taken), which tells the
// holder if that engine granted it. The instance that made the mark
// deletes it after markKeep (it is ephemeral too): another may read it
// later than the one it is for, which must still find it. Marks are as
// rare as such DELs. Connection-bound locks are marked too: their
// holder hears "deleted" at once rather than "gone" at the next renewal.

// marksName is the marks directory's name under the root: never an
// encoded key (encodeKey writes no '.').
const marksName = ".taken"

// markKeep is how long a mark lasts: long past the watch's event, which
// every instance's session gets within its timeout or loses the watch.
const markKeep = time.Minute

// marksDir is the directory of the marks of taken locks.
func (z *ZooKeeper) marksDir() string { return z.opts.Root + "/" + marksName }

// markOf is the mark of lock node p of key: its key's segment and its
// name, joined by '.', which neither holds.
func (z *ZooKeeper) markOf(key, p string) string {
	return z.marksDir() + "/" + encodeKey(key) + "." + p[strings.LastIndexByte(p, '/')+1:]
}

// markedNode is the lock node that mark name, in the marks directory,
// stands for; "" if name is not a mark.
func (z *ZooKeeper) markedNode(name string) string {
	seg, node, ok := strings.Cut(name, ".")
	if !ok || seg == "" || node == "" {
		return ""
	}
	return z.opts.Root + "/" + seg + "/" + node
}

// deleteHeld deletes key's lock node p if its version is version (-1:
// any), as delete does. A delete that takes the lock from its holder
// (engine.Taking) leaves its mark in the same multi: the lock may have
// been granted through another instance even when this one answers for
// it (an extension through this instance tracks it, track).
func (z *ZooKeeper) deleteHeld(ctx context.Context, key, p string, version int32) error {
	if !engine.Taking(ctx) {
		return z.delete(ctx, p, version)
	}
	mark := z.markOf(key, p)
	ops := []any{
		&zk.DeleteRequest{Path: p, Version: version},
		&zk.CreateRequest{Path: mark, Acl: z.opts.ACL, Flags: zk.FlagEphemeral},
	}
	err := z.multiOps(ctx, ops)
	if errors.Is(err, zk.ErrNoNode) && z.makeMarks(ctx) == nil {
		err = z.multiOps(ctx, ops) // the marks directory was missing
	}
	if err != nil {
		return zkErr("delete", p, err)
	}
	z.spawn(func() {
		select {
		case <-time.After(markKeep):
		case <-z.done:
			return
		}
		ctx, cancel := z.cleanupCtx(context.Background())
		defer cancel()
		_ = z.delete(ctx, mark, -1)
	})
	return nil
}

// multiOps runs a multi of ops, unbatched; its error is the failing op's.
func (z *ZooKeeper) multiOps(ctx context.Context, ops []any) error {
	res, err := zkCall(ctx, z, func() ([]zk.MultiResponse, error) { return z.conn.Multi(ops...) })
	return multiDone(ops, res, err)
}

// makeMarks creates the marks directory, and the root, unless they exist.
func (z *ZooKeeper) makeMarks(ctx context.Context) error {
	create := func() error {
		_, err := zkCall(ctx, z, func() (string, error) { return z.conn.Create(z.marksDir(), nil, 0, z.opts.ACL) })
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := create()
	if errors.Is(err, zk.ErrNoNode) {
		if err = z.makeRoot(ctx); err == nil {
			err = create()
		}
	}
	return err
}

// watchMarks keeps a watch on the marks directory until the backend
// closes, and tells the engine of each lock of this instance that a mark
// says was taken. A watch that ends (the session expired, the connection
// failed) is set again, with the marks made meanwhile read then.
func (z *ZooKeeper) watchMarks() {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		if z.Connected() && z.marksOnce() {
			wait = 50 * time.Millisecond
		}
		select {
		case <-z.done:
			return
		case <-time.After(wait):
		}
	}
}

// marksOnce reads the marks, sets the watch, handles the marks and waits
// for the watch; false if it could not set it.
func (z *ZooKeeper) marksOnce() bool {
	ctx, cancel := z.cleanupCtx(context.Background())
	err := z.makeMarks(ctx)
	cancel()
	if err != nil {
		return false
	}
	names, _, ch, err := z.conn.ChildrenW(z.marksDir())
	if err != nil {
		return false
	}
	z.marksWatched.Store(true)
	for _, name := range names {
		z.taken(name)
	}
	select {
	case <-ch:
		return true
	case <-z.done:
		return true
	}
}

// taken handles mark name: if it stands for a lock node this instance
// still answers for, the lock was taken from its holder. A mark read
// again finds no record.
func (z *ZooKeeper) taken(name string) {
	p := z.markedNode(name)
	z.mu.Lock()
	n := z.own[p]
	ours := n != nil && n.held
	if ours {
		n.timer.Stop()
		delete(z.own, p)
		z.unindex(p, n)
	}
	z.mu.Unlock()
	if !ours {
		return
	}
	z.log.Info("lock taken through another instance", zap.String("key", n.key))
	if t, ok := z.opts.Events.(taker); ok && !z.isClosed() {
		t.Taken(n.key, n.token)
	}
}
