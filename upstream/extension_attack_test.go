package upstream

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// cutNode fails every call at once, as a link that is down.
type cutNode struct{ quorum.Node }

func (c cutNode) Do(_ context.Context, _ *quorum.Op, tag int, done quorum.Sink) {
	done.Put(quorum.Reply{Tag: tag, Err: errors.New("link cut")})
}

// TestAttackExtensionLandsAfterRelease is quorum's
// TestAttackMarkExtensionLandsAfterRelease on real nodes (three
// redis-servers, and three embedded ones): a is granted on every node; a's
// renewal through B is granted by nodes 0 and 1, its extension to node 2
// held on its way; a is released through C (C's link to node 1 cut: nodes
// 0 and 2 delete it), b is granted through C by nodes 0 and 2 and
// released. Then the extension lands on node 2, where the key is free. It
// must not answer "free": a heal from that answer took node 2 with a's
// fence, and with node 1, which the release missed, a, released, held a
// majority again with a fence below b's (LOCKINFO showed a; a's LOCK …
// TOKEN answered its old fence after b's). The meta b's grant wrote
// outlives b's key (release.lua deletes the key alone), and extend.lua
// answers "not held" beside it.
func TestAttackExtensionLandsAfterRelease(t *testing.T) {
	backends := map[string]func(t *testing.T) []string{
		"redis": func(t *testing.T) []string {
			var addrs []string
			for _, s := range redistest.StartN(t, 3, redistest.Options{}) {
				addrs = append(addrs, s.Addr())
			}
			return addrs
		},
		"miniredis": func(t *testing.T) []string { return startEmbedded(t, 3).Addrs() },
	}
	for name, start := range backends {
		t.Run(name, func(t *testing.T) { extensionLandsAfterRelease(t, start(t)) })
	}
}

func extensionLandsAfterRelease(t *testing.T, addrs []string) {
	ctx := testCtx(t)
	over := func(wrap func(i int, n quorum.Node) quorum.Node) *quorum.Redlock {
		nodes := make([]quorum.Node, len(addrs))
		for i, a := range addrs {
			nodes[i] = wrap(i, newNode(t, RedisOptions{Addr: a}))
		}
		r := quorum.New(nodes, quorum.Config{})
		t.Cleanup(func() { r.Close() })
		return r
	}
	plain := func(_ int, n quorum.Node) quorum.Node { return n }
	gated := newGate(quorum.OpExtend, "k")
	rA, rD := over(plain), over(plain)
	rB := over(func(i int, n quorum.Node) quorum.Node {
		if i == 2 {
			gated.Node = n
			return gated
		}
		return n
	})
	rC := over(func(i int, n quorum.Node) quorum.Node {
		if i == 1 {
			return cutNode{n}
		}
		return n
	})
	ga, err := rA.Acquire(ctx, "k", hold("a", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	heldOn(t, "k", "a", addrs...)
	if _, err := rB.Extend(ctx, "k", "a", 0, ""); err != nil {
		t.Fatalf("a's renewal: %v", err)
	}
	select {
	case <-gated.pending:
	case <-time.After(testTimeout):
		t.Fatal("no extension sent to node 2")
	}
	if ok, err := rC.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release a: %v %v", ok, err)
	}
	gb, err := rC.Acquire(ctx, "k", hold("b", 10*time.Second))
	if err != nil || gb.Fence <= ga.Fence {
		t.Fatalf("b: %+v %v, want a fence above a's %d", gb, err, ga.Fence)
	}
	if ok, err := rC.Release(ctx, "k", "b", nil, nil); !ok || err != nil {
		t.Fatalf("release b: %v %v", ok, err)
	}
	gated.gate <- struct{}{}
	rep := <-gated.landed
	if rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if rep.FreeAt != 0 || rep.TTL != 0 {
		t.Errorf("a's extension, landing on node 2 after a's release and b's grant and release: %+v, "+
			"want not held (no FreeAt: a heal from it would take node 2 with a's fence %d)", rep, ga.Fence)
	}
	if e, ok, err := rD.Inspect(ctx, "k"); err != nil || ok && e.Token == "a" {
		t.Errorf("LOCKINFO after a's release and b's grant (fence %d): %+v %v %v", gb.Fence, e, ok, err)
	}
	g, err := rD.Acquire(ctx, "k", hold("a", 10*time.Second))
	if err != nil || g.Fence <= gb.Fence {
		t.Errorf("a's LOCK after b's grant (fence %d): %+v %v, want a fence above it", gb.Fence, g, err)
	}
}

// TestUncontendedCycleCommands: an uncontended grant and release through
// a Redlock, with the meta kept past its key (quorum.Op.MetaFor), run on a
// node the commands they ran when a release deleted the meta with the key
// and one SET more: the acquire's EXISTS, INCR and two SETs (the key, the
// meta), the release's MGET, one DEL (of the key alone) and one SET (the
// meta replaced by one that describes nobody), besides the script calls
// and each pipeline's TIME; and the meta is left with the grace at most.
func TestUncontendedCycleCommands(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	ctx, raw := testCtx(t), rawClient(t, s.Addr())
	r := quorum.New([]quorum.Node{newNode(t, RedisOptions{Addr: s.Addr()})}, quorum.Config{})
	t.Cleanup(func() { r.Close() })
	if _, err := r.Acquire(ctx, "warm", hold("a", time.Second)); err != nil { // loads the scripts, writes the counter
		t.Fatal(err)
	}
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Acquire(ctx, "k", hold("a", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Release(ctx, "k", "a", nil, nil); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	info := raw.Info(ctx, "commandstats").Val()
	got := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":calls=")
		if !ok || strings.HasSuffix(name, "|resetstat") {
			continue
		}
		calls, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_time":
		default:
			got[strings.TrimPrefix(name, "cmdstat_")] = calls
		}
	}
	want := map[string]int64{"exists": 1, "incr": 1, "set": 3, "mget": 1, "del": 1}
	if !maps.Equal(got, want) {
		t.Errorf("an uncontended cycle ran %v besides the scripts and TIME, want %v:\n%s", got, want, info)
	}
	if n := raw.Exists(ctx, "k").Val(); n != 0 {
		t.Error("the key left after the release")
	}
	if ttl := raw.PTTL(ctx, DefaultPrefix+"meta:k").Val(); ttl <= 0 || ttl > 2*quorum.MaxNodeTimeout+time.Second {
		t.Errorf("the meta's PTTL after the release: %v, want the grace", ttl)
	}
}

// TestReleaseLeavesAMetaWhereTheHoldHadNone: a hold with no meta of its
// own (a client's script, or the repair of a drifted node, SET the key)
// leaves, when a release deletes it, a meta that describes nobody for the
// grace (quorum.Op.MetaFor), so that an extension landing after the
// release heals nothing there either; a read of the key answers it free.
func TestReleaseLeavesAMetaWhereTheHoldHadNone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
		if err := raw.Set(ctx, "k", "a", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: "k", Token: "a", MetaFor: 3 * time.Second}); r.Err != nil || !r.OK {
			t.Fatalf("release: %+v", r)
		}
		if ttl := raw.PTTL(ctx, DefaultPrefix+"meta:k").Val(); ttl <= 0 || ttl > 3*time.Second {
			t.Errorf("the meta's PTTL after the release: %v, want the grace's (0, 3s]", ttl)
		}
		if m, err := readMeta(ctx, raw, "k"); err != nil || m["token"] != "" || m["fence"] != "" {
			t.Errorf("the meta left: %v %v, want one that describes nobody", m, err)
		}
		ext := n.do(ctx, &quorum.Op{Kind: quorum.OpExtend, Key: "k", Token: "a", MarkFor: time.Minute, MetaFor: 3 * time.Second})
		if ext.Err != nil || ext.TTL != 0 || ext.FreeAt != 0 {
			t.Errorf("an extension after the release: %+v, want not held (no FreeAt)", ext)
		}
		if _, ok, err := n.Inspect(ctx, "k"); ok || err != nil {
			t.Errorf("Inspect after the release: %v %v, want free", ok, err)
		}
		if c, err := n.Acquire(ctx, "k", hold("b", time.Minute)); err != nil || c.State != quorum.Acquired {
			t.Errorf("b's acquire after the release: %+v %v", c, err)
		}
	})
}
