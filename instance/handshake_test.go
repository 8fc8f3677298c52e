package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestHandshake walks the connection commands real clients send, on an
// instance that requires a password.
func TestHandshake(t *testing.T) {
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Password = "s3cret"
	in := startInstance(t, cfg)
	c := dialRaw(t, in.Addr())
	steps := []struct {
		args []string
		want string // exact, or a prefix ending in "…"
	}{
		{[]string{"PING"}, "-NOAUTH Authentication required."},
		{[]string{"LOCK", "k"}, "-NOAUTH Authentication required."},
		{[]string{"HELLO", "3"}, "-NOAUTH HELLO must be called with the client already authenticated…"},
		{[]string{"AUTH", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled."},
		{[]string{"HELLO", "3", "AUTH", "default", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled."},
		{[]string{"HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "app-1"}, "[server redis version 7.2.0 proto :3 id :1 mode standalone role master modules []]"},
		{[]string{"CLIENT", "GETNAME"}, "app-1"},
		{[]string{"CLIENT", "ID"}, ":1"},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "go-redis"}, "+OK"},
		{[]string{"CLIENT", "SETINFO", "LIB-VER", "9.0"}, "+OK"},
		{[]string{"CLIENT", "INFO"}, "id=1 addr=…"},
		{[]string{"CLIENT", "LIST"}, "id=1 addr=…"},
		{[]string{"CLIENT", "NOPE"}, "-ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try CLIENT HELP."},
		{[]string{"ECHO", "hi"}, "hi"},
		{[]string{"PING", "there"}, "there"},
		{[]string{"SELECT", "0"}, "+OK"},
		{[]string{"READONLY"}, "+OK"},
		{[]string{"COMMAND"}, "[[acl :-2 …"}, // entries checked against Redis's by TestCommandInfoMatchesRedis
		{[]string{"COMMAND", "DOCS", "lock"}, "[lock [summary …"},
		{[]string{"COMMAND", "COUNT"}, ":79"}, // as COMMAND lists them: not POST and Host:, as in Redis; ACL, LOCKPROXY, TYPE, WAIT, WAITAOF, pub/sub (sharded and PUBSUB too), the seven list commands, the 23 reads of lock keys (commands/reads.go) and the five of transactions
		{[]string{"INFO", "locks"}, "# Locks\r\nlocks_granted:0…"},
		{[]string{"LOCKINFO", "nobody"}, "(nil)"}, // RESP3 null
		{[]string{"LOCK", "bound-key"}, "[…"},
		{[]string{"RESET"}, "+RESET"},
		{[]string{"PING"}, "-NOAUTH Authentication required."},
		{[]string{"AUTH", "default", "s3cret"}, "+OK"},
		{[]string{"CLIENT", "GETNAME"}, "(nil)"},
		{[]string{"LOCKINFO", "bound-key"}, "(nil)"}, // RESET released the bound lock
		{[]string{"HELLO"}, "[server redis version 7.2.0 proto :2 id :1 mode standalone role master modules []]"},
		{[]string{"QUIT"}, "+OK"},
	}
	for _, s := range steps {
		got := c.do(s.args...)
		if prefix, ok := strings.CutSuffix(s.want, "…"); ok && strings.HasPrefix(got, prefix) || got == s.want {
			continue
		}
		t.Errorf("%q: got %q, want %q", s.args, got, s.want)
	}
	if !c.closed() {
		t.Error("QUIT left the connection open")
	}

	for _, proto := range []int{2, 3} {
		rc := redis.NewClient(&redis.Options{Addr: in.Addr(), Password: "s3cret", Protocol: proto, ClientName: "pooled"})
		if g, ok, err := lock(context.Background(), rc, uniqueKey(t), "PX", 1000); !ok || err != nil {
			t.Fatalf("go-redis RESP%d with a password: %+v %v %v", proto, g, ok, err)
		}
		rc.Close()
	}
}

// TestDrainReleasesBoundLocks: shutting an instance down closes its clients
// and releases their connection-bound locks on the nodes at once.
func TestDrainReleasesBoundLocks(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	cfg := testConfig(nodes)
	cfg.Locks.BoundLeaseMS = 60000 // expiry would take a minute: only the drain frees it
	in, err := instance.Start(cfg, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, in.Addr(), 2)
	key := uniqueKey(t)
	mustLock(t, c, key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Released means no majority holds it: a node that misses the release
	// within its timeout (a loaded machine) keeps the key until its lease
	// ends, as after any decided release.
	holding := 0
	for _, n := range nodes {
		raw := redis.NewClient(&redis.Options{Addr: n.Addr()})
		got, err := raw.Exists(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		holding += int(got)
		raw.Close()
	}
	if holding > len(nodes)/2 {
		t.Fatalf("%d of %d nodes still hold the lock after the drain", holding, len(nodes))
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("client connection survived the drain")
	}
}

// TestEmbeddedDefault: the default config serves locks with no external
// service, leases really expire, and fences increase.
func TestEmbeddedDefault(t *testing.T) {
	cfg := instance.Default()
	cfg.Listen = "127.0.0.1:0"
	in := startInstance(t, cfg)
	c := newClient(t, in.Addr(), 3)
	key := uniqueKey(t)
	const lease = time.Second
	sent := time.Now()
	first := mustLock(t, c, key, "PX", lease.Milliseconds())
	// No grant may be heard before the first lease, set on the nodes after
	// sent, can have run out; one heard later must carry a larger fence.
	var next lockReply
	eventually(t, lease+30*time.Second, "the lease expires and the key is granted again", func() bool {
		r, ok, err := lock(context.Background(), c, key, "PX", 1000)
		if ok && time.Since(sent) < lease {
			t.Fatalf("granted again %v after the first %v lease was asked for", time.Since(sent), lease)
		}
		next = r
		return ok && err == nil
	})
	if next.fence <= first.fence {
		t.Fatalf("fence %d after %d", next.fence, first.fence)
	}
}
