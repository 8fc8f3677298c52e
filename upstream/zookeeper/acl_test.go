package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/internal/zktest"
)

// TestZooKeeperDigestACL: with a digest, lockproxy's nodes are closed to a
// session that does not know the password, and open to one that does.
func TestZooKeeperDigestACL(t *testing.T) {
	srv := zktest.Start(t)
	z := newZK(t, []string{srv.Addr()}, Options{Digest: "lockproxy:s3cret"})
	mustGrant(t, z, "k", hold("a", time.Minute))
	dir := DefaultRoot + "/" + encodeKey("k")

	stranger := rawZK(t, srv.Addr())
	if _, _, err := stranger.Children(dir); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("a session without the password listed the lock's nodes: %v", err)
	}
	friend := rawZK(t, srv.Addr())
	if err := friend.AddAuth("digest", []byte("lockproxy:s3cret")); err != nil {
		t.Fatal(err)
	}
	if names, _, err := friend.Children(dir); err != nil || len(names) != 1 {
		t.Fatalf("with the password: %v %v", names, err)
	}
	if _, err := New(Options{Servers: []string{srv.Addr()}, Digest: "no-colon"}, nil); err == nil {
		t.Fatal("a digest without user:password was accepted")
	}
}
