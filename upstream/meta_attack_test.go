package upstream

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// TestAttackMetaOfAPersistedKeyEndsAfterItsRelease: a lock key with no
// expiry (a client's script wrote or persisted it) whose meta was lost
// gets, from a commit of its token, a meta started again with no TTL
// (commit.lua: "one started again has none", so that it lasts as long as
// the key). When a release deleted the meta with the key, that was
// harmless; a release now deletes the key alone (the meta outlives it by
// the grace), so the meta stayed on the node for ever, and every
// renewal's extension of that key there answered "not held" for ever (no
// heal onto the node) until another grant wrote the meta. The release
// replaces the meta with one that describes nobody, for the grace.
func TestAttackMetaOfAPersistedKeyEndsAfterItsRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		if err := raw.Set(ctx, "k", "a", 0).Err(); err != nil { // no expiry
			t.Fatal(err)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpCommit, Key: "k", Token: "a", Fence: 7, MetaFor: 3 * time.Second}); r.Err != nil || !r.OK {
			t.Fatalf("commit: %+v", r)
		}
		if m, err := readMeta(ctx, raw, "k"); err != nil || m["token"] != "a" || m["fence"] != "7" {
			t.Fatalf("the meta the commit wrote: %v %v", m, err)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", MetaFor: 3 * time.Second}); r.Err != nil || !r.OK {
			t.Fatalf("release: %+v", r)
		}
		if raw.Exists(ctx, "k").Val() != 0 {
			t.Fatal("the key left after its release")
		}
		if ttl, err := raw.PTTL(ctx, DefaultPrefix+"meta:k").Result(); err != nil || ttl == -1*time.Nanosecond || ttl > 3*time.Second {
			// go-redis answers -1 (no expiry) as -1ns
			t.Errorf("the meta's PTTL after the release: %v %v, want gone or at most the grace", ttl, err)
		}
	})
}

// TestAttackRollbackAfterReleaseLeavesAScriptsHold: attempt x of token a
// takes the key (its meta: attempt x, took '1'); a release of a deletes
// the key and, now, leaves the meta for the grace; a client's script SETs
// the key to a again (legacy values need not be unique, and a client may
// hold its own token through a script); then x's rollback (a refused or
// undone attempt's, carried to the node for up to the lease and a minute)
// lands. When the release deleted the meta with the key, the rollback
// found a hold with no meta of its own and took nothing. With the meta
// left, the script's hold looks like x's and the rollback deleted it.
// The release now replaces the meta with one that describes nobody, for
// the grace.
func TestAttackRollbackAfterReleaseLeavesAScriptsHold(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		const grace = 3 * time.Second
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", 10*time.Second), Attempt: "x", MetaFor: grace}); r.Err != nil || r.Claim.State != quorum.Acquired {
			t.Fatalf("acquire x: %+v", r)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", MetaFor: grace}); r.Err != nil || !r.OK {
			t.Fatalf("release: %+v", r)
		}
		if err := raw.Set(ctx, "k", "a", 10*time.Second).Err(); err != nil { // the client's script
			t.Fatal(err)
		}
		r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", Rollback: true, Attempt: "x",
			Undo: "x", UndoFor: 10 * time.Second, MetaFor: grace})
		if r.Err != nil || r.OK {
			t.Errorf("x's rollback after the release and the script's SET: %+v, want nothing taken", r)
		}
		if v := raw.Get(ctx, "k").Val(); v != "a" {
			t.Errorf("the script's hold after x's rollback: %q, want a", v)
		}
	})
}

// TestAttackReleasedMetaLastsTheGraceOnly: a lease of a minute released at
// once. The release left the hold's meta for the rest of its TTL, the
// lease and the grace: every lock released early kept a meta on every
// node for up to its whole lease (memory, and on the embedded backend a
// key more for every tick to walk). The meta after a release lasts the
// grace, and describes nobody.
func TestAttackReleasedMetaLastsTheGraceOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		const grace = 3 * time.Second
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: "k", Hold: hold("a", time.Minute), Attempt: "x", MetaFor: grace}); r.Err != nil || r.Claim.State != quorum.Acquired {
			t.Fatalf("acquire: %+v", r)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", MetaFor: grace}); r.Err != nil || !r.OK {
			t.Fatalf("release: %+v", r)
		}
		if ttl := raw.PTTL(ctx, DefaultPrefix+"meta:k").Val(); ttl <= 0 || ttl > grace {
			t.Errorf("the meta's PTTL after the release of a one-minute lease: %v, want the grace's (0, %v]", ttl, grace)
		}
		if m, err := readMeta(ctx, raw, "k"); err != nil || m["token"] != "" || m["fence"] != "" {
			t.Errorf("the meta left: %v %v, want one that describes nobody", m, err)
		}
		ext := n.do(ctx, &quorum.Op{Kind: quorum.OpExtend, Key: "k", Token: "a", MarkFor: time.Minute, MetaFor: grace})
		if ext.Err != nil || ext.TTL != 0 || ext.FreeAt != 0 {
			t.Errorf("an extension after the release: %+v, want not held (no FreeAt)", ext)
		}
	})
}
