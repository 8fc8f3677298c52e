package upstream

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on the record of a restart without fsync (quorum.RestartedMark)
// on redis-servers.

// TestDurableWhileHeldOutRecordDeleted: as
// TestDurableWhileHeldOutNotCountedAtOnce, with the record of the restart
// (<prefix>vetted: restarted) deleted from nodes 0 and 1 by their
// operator while instance A holds them out, before turning appendonly and
// appendfsync always on. A wrote the record once, at the restart: instance
// B, started then, found them durable with no record and counted them at
// once. A writes it again at its next read, while it holds them out, and
// B holds them out too: x's fence is above top.
func TestDurableWhileHeldOutRecordDeleted(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr()})
	}
	a := quorum.New(nodes, quorum.Config{MaxLease: time.Hour, StatusEvery: 100 * time.Millisecond})
	defer a.Close()
	const lease = 2 * time.Second
	b := restartRedlock(t, servers, lease)
	waitCounted(t, b, 30*time.Second, true, true, true)
	ctx := t.Context()
	waitCounted(t, a, 30*time.Second, true, true, true)
	b.Close()
	top := grantedThrice(t, a, lease)
	restartTwoEmpty(t, servers, a)
	for _, s := range servers[:2] {
		raw := rawClient(t, s.Addr())
		eventually(t, 10*time.Second, "the restart recorded on "+s.Addr(), func() bool {
			return raw.Get(ctx, DefaultPrefix+"vetted").Val() == quorum.RestartedMark
		})
		if err := raw.Del(ctx, DefaultPrefix+"vetted").Err(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the restart recorded again on "+s.Addr(), func() bool {
			return raw.Get(ctx, DefaultPrefix+"vetted").Val() == quorum.RestartedMark
		})
		if err := raw.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
			t.Fatal(err)
		}
	}
	grantAboveThroughB(t, servers, lease, top, "the record of the restart was deleted")
}
