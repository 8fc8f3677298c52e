package instance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockproxy/lockproxy/instance"
	"github.com/redis/go-redis/v9"
)

// lineReader returns a reader of the places in a key's waiting line that
// the servers of cfg's backend recorded, as another instance sees them:
// on redlock the members of the line on the node that has fewest (a place
// is taken on every node that answers); on ZooKeeper the key's nodes that
// are waiters' places (data without a mode, docs/backends-and-safety.md).
// A read that fails counts -1 (polls retry).
func lineReader(t *testing.T, cfg instance.Config) func(key string) int64 {
	t.Helper()
	if cfg.BackendName() == "zookeeper" {
		return zkLineReader(t, cfg)
	}
	var raws []*redis.Client
	for _, addr := range cfg.Redlock.Nodes {
		r := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { r.Close() })
		raws = append(raws, r)
	}
	return func(key string) int64 {
		least := int64(-1)
		for i, r := range raws {
			n, err := r.ZCard(context.Background(), cfg.Redlock.KeyPrefix+"line:"+key).Result()
			if err != nil {
				return -1
			}
			if i == 0 || n < least {
				least = n
			}
		}
		return least
	}
}

// zkLineReader is lineReader on ZooKeeper: a session of its own.
func zkLineReader(t *testing.T, cfg instance.Config) func(key string) int64 {
	t.Helper()
	conn, _, err := zk.Connect(cfg.ZooKeeper.Servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return func(key string) int64 {
		dir := cfg.ZooKeeper.Root + "/" + zkKeyNode(key)
		kids, _, err := conn.Children(dir)
		if err != nil {
			return -1 // the key's node, made by the first acquire, may not be there yet
		}
		var places int64
		for _, k := range kids {
			data, _, err := conn.Get(dir + "/" + k)
			if errors.Is(err, zk.ErrNoNode) { // served and gone meanwhile
				continue
			}
			var d struct {
				Mode string `json:"mode"`
			}
			if err != nil || json.Unmarshal(data, &d) != nil {
				return -1
			}
			if d.Mode == "" {
				places++
			}
		}
		return places
	}
}

// zkKeyNode is the name of key's node under the root, as the ZooKeeper
// backend encodes it (upstream/zookeeper's encodeKey): letters, digits,
// '_' and '-' as they are, every other byte %XX in upper-case hex.
func zkKeyNode(key string) string {
	var b strings.Builder
	for _, c := range []byte(key) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
