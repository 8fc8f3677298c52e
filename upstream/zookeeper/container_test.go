package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/internal/zktest"
)

// TestZooKeeperEmptyKeyNodesGo: a key's parent is a container node, which
// ZooKeeper removes once its last lock node is gone (zktest runs the
// container check every 0.2 s; ZooKeeper's default is a minute).
func TestZooKeeperEmptyKeyNodesGo(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	mustGrant(t, z, "k", hold("a", time.Minute))
	raw := rawZK(t, srv.Addr())
	dir := DefaultRoot + "/" + encodeKey("k")
	if ok, _, err := raw.Exists(dir); !ok || err != nil {
		t.Fatalf("key node while held: %v %v", ok, err)
	}
	zkRelease(t, z, "k", "a", true)
	eventually(t, 5*time.Second, "the empty key node removed", func() bool {
		ok, _, err := raw.Exists(dir)
		return !ok && (err == nil || errors.Is(err, zk.ErrNoNode))
	})
	if ok, _, _ := raw.Exists(DefaultRoot); !ok {
		t.Fatal("the root went too")
	}
}

// TestZooKeeperReleaseOwnNodeGone: an instance releases its own lock node
// by its known path in one request; when the node is gone already
// (deleted behind its back), the release reports false and the key is
// free to take again.
func TestZooKeeperReleaseOwnNodeGone(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{})
	mustGrant(t, z, "k", hold("a", time.Minute))
	zkRelease(t, z, "k", "a", true)
	mustGrant(t, z, "k", hold("a", time.Minute))
	raw := rawZK(t, srv.Addr())
	for _, name := range lockNodes(t, raw, "k") {
		if err := raw.Delete(DefaultRoot+"/"+encodeKey("k")+"/"+name, -1); err != nil {
			t.Fatal(err)
		}
	}
	zkRelease(t, z, "k", "a", false)
	mustGrant(t, z, "k", hold("b", time.Minute))
	zkRelease(t, z, "k", "a", false) // a's record must not release b's lock
	zkRelease(t, z, "k", "b", true)
}
