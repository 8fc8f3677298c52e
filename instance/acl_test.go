package instance_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// aclConfig is a redlock config over three real redis-servers, with a
// password for the default user and a user limited to billing:* keys
// (native and legacy commands), and with passthrough to a data Redis too.
func aclConfig(t *testing.T, passthrough bool) instance.Config {
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	if passthrough {
		cfg.Passthrough.Address = redistest.Start(t, redistest.Options{}).Addr()
	}
	cfg.Password = "root-pw"
	cfg.Users = []instance.UserConfig{{Name: "billing", Password: "billing-pw", Keys: []string{"billing:*"}, Commands: "all"}}
	return cfg
}

// asUser is a raw connection authenticated as user.
func asUser(t *testing.T, addr, user, pass string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	args := []string{"AUTH", user, pass}
	if user == "" {
		args = []string{"AUTH", pass}
	}
	if r := c.do(args...); r != "+OK" {
		t.Fatalf("AUTH %s: %q", user, r)
	}
	return c
}

// TestACLClientKillAndList: a user limited to billing:* ran CLIENT KILL
// TYPE normal SKIPME yes and closed the default user's connection, whose
// bound lock on orders:9 went to another client at once; CLIENT LIST
// showed it every client. Now it sees and kills only its own user's
// connections; the default user still sees and kills all.
func TestACLClientKillAndList(t *testing.T) {
	in := startInstance(t, aclConfig(t, false))
	root := asUser(t, in.Addr(), "", "root-pw")
	key := "orders:" + uniqueKey(t)
	if r := root.do("LOCK", key); !strings.HasPrefix(r, "[") {
		t.Fatalf("root's bound LOCK: %q", r)
	}
	rootID := strings.TrimPrefix(root.do("CLIENT", "ID"), ":")
	billing := asUser(t, in.Addr(), "billing", "billing-pw")
	other := asUser(t, in.Addr(), "billing", "billing-pw")
	otherID := strings.TrimPrefix(other.do("CLIENT", "ID"), ":")

	list := billing.do("CLIENT", "LIST")
	if strings.Contains(list, "id="+rootID+" ") || !strings.Contains(list, "id="+otherID+" ") {
		t.Fatalf("billing's CLIENT LIST shows other users' clients or misses its own:\n%s", list)
	}
	if r := billing.do("CLIENT", "KILL", "ID", rootID); r != ":0" {
		t.Fatalf("billing's CLIENT KILL ID <root>: %q", r)
	}
	if r := billing.do("CLIENT", "KILL", "USER", "default"); r != ":0" {
		t.Fatalf("billing's CLIENT KILL USER default: %q", r)
	}
	if r := billing.do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); r != ":1" {
		t.Fatalf("billing's CLIENT KILL TYPE normal SKIPME yes: %q (want its other connection only)", r)
	}
	if !other.closed() {
		t.Fatal("billing's other connection was not killed")
	}
	if r := root.do("PING"); r != "+PONG" {
		t.Fatalf("root after billing's CLIENT KILL: %q", r)
	}
	thief := asUser(t, in.Addr(), "", "root-pw")
	if r := thief.do("LOCK", key, "PX", "5000"); r != "(nil)" {
		t.Fatalf("root's bound lock was taken by another client: %q", r)
	}
	if list := root.do("CLIENT", "LIST"); !strings.Contains(list, "id=") || strings.Count(list, "\n") < 3 {
		t.Fatalf("root's CLIENT LIST:\n%s", list)
	}
	billingID := strings.TrimPrefix(billing.do("CLIENT", "ID"), ":")
	if r := root.do("CLIENT", "KILL", "USER", "billing"); r != ":1" {
		t.Fatalf("root's CLIENT KILL USER billing: %q", r)
	}
	if !billing.closed() {
		t.Fatalf("root's kill of billing's connection %s", billingID)
	}
}

// TestACLInfoDeployment: INFO gave any user the nodes' and the data
// Redis's addresses. The default user still sees # Nodes and
// # Passthrough; a restricted user sees neither, by default, all or name.
func TestACLInfoDeployment(t *testing.T) {
	cfg := aclConfig(t, true)
	in := startInstance(t, cfg)
	root := asUser(t, in.Addr(), "", "root-pw")
	for _, sec := range []string{"all", "nodes", "passthrough"} {
		if info := root.do("INFO", sec); !strings.Contains(info, cfg.Redlock.Nodes[0]) && !strings.Contains(info, cfg.Passthrough.Address) {
			t.Fatalf("root's INFO %s shows no address:\n%s", sec, info)
		}
	}
	billing := asUser(t, in.Addr(), "billing", "billing-pw")
	for _, sec := range [][]string{{"INFO"}, {"INFO", "all"}, {"INFO", "everything"}, {"INFO", "nodes"}, {"INFO", "passthrough"}} {
		info := billing.do(sec...)
		for _, addr := range append([]string{cfg.Passthrough.Address}, cfg.Redlock.Nodes...) {
			if strings.Contains(info, addr) {
				t.Fatalf("billing's %v shows %s:\n%s", sec, addr, info)
			}
		}
		if strings.Contains(info, "# Nodes") || strings.Contains(info, "# Passthrough") {
			t.Fatalf("billing's %v:\n%s", sec, info)
		}
	}
	if info := billing.do("INFO"); !strings.Contains(info, "# Locks") {
		t.Fatalf("billing's INFO lost the other sections:\n%s", info)
	}
}

// TestACLScriptFlush: SCRIPT FLUSH by one user made another's EVALSHA
// fail with NOSCRIPT. Only the default user may flush the shared cache.
func TestACLScriptFlush(t *testing.T) {
	in := startInstance(t, aclConfig(t, false))
	root := asUser(t, in.Addr(), "", "root-pw")
	sha := root.do("SCRIPT", "LOAD", "return redis.call('get', KEYS[1])")
	billing := asUser(t, in.Addr(), "billing", "billing-pw")
	if r := billing.do("SCRIPT", "FLUSH"); r != "-NOPERM User billing has no permissions to run the 'script|flush' command" {
		t.Fatalf("billing's SCRIPT FLUSH: %q", r)
	}
	if r := root.do("SCRIPT", "EXISTS", sha); r != "[:1]" {
		t.Fatalf("root's script after billing's SCRIPT FLUSH: %q", r)
	}
	if r := billing.do("SCRIPT", "EXISTS", sha); r != "[:1]" {
		t.Fatalf("billing's SCRIPT EXISTS: %q", r)
	}
	if r := root.do("SCRIPT", "FLUSH"); r != "+OK" {
		t.Fatalf("root's SCRIPT FLUSH: %q", r)
	}
}

// TestACLPubSub: a user limited to billing:* saw orders: channels in
// PUBSUB CHANNELS, received their messages through PSUBSCRIBE * and sent
// a fake wake-up to an orders: channel. Channels now follow key
// patterns; the default user is unchanged.
func TestACLPubSub(t *testing.T) {
	in := startInstance(t, aclConfig(t, false))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := redis.NewClient(&redis.Options{Addr: in.Addr(), Password: "root-pw", MaxRetries: -1})
	t.Cleanup(func() { root.Close() })
	orders := "orders:" + uniqueKey(t)
	sub := root.Subscribe(ctx, orders)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	billing := asUser(t, in.Addr(), "billing", "billing-pw")
	if r := billing.do("PUBSUB", "CHANNELS"); strings.Contains(r, orders) {
		t.Fatalf("billing's PUBSUB CHANNELS: %q", r)
	}
	if r := billing.do("PUBSUB", "CHANNELS", "orders:*"); r != "[]" {
		t.Fatalf("billing's PUBSUB CHANNELS orders:*: %q", r)
	}
	if r := billing.do("PUBSUB", "NUMSUB", orders); r != "["+orders+" :0]" {
		t.Fatalf("billing's PUBSUB NUMSUB: %q", r)
	}
	const noperm = "-NOPERM No permissions to access a channel"
	for _, cmd := range [][]string{{"PUBLISH", orders, "released"}, {"SUBSCRIBE", "billing:a", orders},
		{"PSUBSCRIBE", "*"}, {"PSUBSCRIBE", "orders:*"}, {"PSUBSCRIBE", "billing:[a]"}, {"SPUBLISH", orders, "x"}, {"SSUBSCRIBE", orders}} {
		if r := billing.do(cmd...); r != noperm {
			t.Fatalf("billing's %v: %q", cmd, r)
		}
	}
	if r := root.Do(ctx, "PUBSUB", "NUMSUB", orders).String(); !strings.Contains(r, orders+" 1") {
		t.Fatalf("root's PUBSUB NUMSUB: %s", r)
	}
	// billing's own channels work, by name and by one of its patterns.
	if r := billing.do("PSUBSCRIBE", "billing:*"); r != "[psubscribe billing:* :1]" {
		t.Fatalf("billing's PSUBSCRIBE billing:*: %q", r)
	}
	if n, err := root.Publish(ctx, "billing:x", "hi").Result(); n != 1 || err != nil {
		t.Fatalf("PUBLISH billing:x: %d %v", n, err)
	}
	if r := billing.reply(); r != "[pmessage billing:* billing:x hi]" {
		t.Fatalf("billing's message: %q", r)
	}
	if n, err := root.Publish(ctx, orders, "real").Result(); n != 1 || err != nil {
		t.Fatalf("root's PUBLISH %s: %d %v", orders, n, err)
	}
	if m, err := sub.ReceiveMessage(ctx); err != nil || m.Payload != "real" {
		t.Fatalf("root's subscriber got %v %v, want only root's message", m, err)
	}
}

// TestUsersWithoutDefaultPassword: [[users]] with no password for the
// default user left every client every key without a word: now start-up
// warns.
func TestUsersWithoutDefaultPassword(t *testing.T) {
	cfg := embeddedConfig()
	cfg.Users = []instance.UserConfig{{Name: "billing", Password: "billing-pw", Keys: []string{"billing:*"}}}
	_, logs := startObserved(t, cfg)
	if n := linesWith(logs, "the default user has no password"); n != 1 {
		t.Fatalf("%d warnings about [[users]] without a default password", n)
	}
	cfg.Password = "root-pw"
	_, logs = startObserved(t, cfg)
	if n := linesWith(logs, "the default user has no password"); n != 0 {
		t.Fatalf("a warning with a default password set")
	}
}

// TestACLWaitShares: with max_waiters 2 and max_blocked_clients 1, two
// LOCK ... WAIT and one BLPOP by a user limited to billing:* refused every
// other user. Each restricted user now has a share, limit/(users+1): here
// one waiter and no blocked client; the default user keeps the rest.
func TestACLWaitShares(t *testing.T) {
	cfg := aclConfig(t, false)
	cfg.Limits.MaxWaiters = 2
	cfg.Limits.MaxBlockedClients = 1
	in := startInstance(t, cfg)
	root := asUser(t, in.Addr(), "", "root-pw")
	held := "billing:" + uniqueKey(t)
	if r := root.do("LOCK", held, "PX", "60000"); !strings.HasPrefix(r, "[") {
		t.Fatalf("LOCK %s: %q", held, r)
	}
	waitCmd := func(key string) string {
		return "*6\r\n$4\r\nLOCK\r\n$" + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n$2\r\nPX\r\n$4\r\n5000\r\n$4\r\nWAIT\r\n$5\r\n30000\r\n"
	}
	first := asUser(t, in.Addr(), "billing", "billing-pw")
	first.send(waitCmd(held)) // waits: billing's one place
	eventually(t, 30*time.Second, "billing's first waiter in line", func() bool {
		return strings.Contains(root.do("INFO", "locks"), "waiters:1\r\n")
	})
	second := asUser(t, in.Addr(), "billing", "billing-pw")
	if r := second.do("LOCK", held, "PX", "5000", "WAIT", "30000"); !strings.HasPrefix(r, "-ERR max number of waiters reached for this user") {
		t.Fatalf("billing's second LOCK ... WAIT: %q", r)
	}
	if r := second.do("BLPOP", "billing:list", "30"); !strings.HasPrefix(r, "-ERR max number of blocked clients reached for this user") {
		t.Fatalf("billing's BLPOP: %q", r)
	}
	// The default user still has a waiter place and the blocked client.
	other := "orders:" + uniqueKey(t)
	if r := root.do("LOCK", other, "PX", "60000"); !strings.HasPrefix(r, "[") {
		t.Fatalf("LOCK %s: %q", other, r)
	}
	rootWaiter := asUser(t, in.Addr(), "", "root-pw")
	if r := rootWaiter.do("LOCK", other, "PX", "5000", "WAIT", "200"); r != "(nil)" {
		t.Fatalf("the default user's LOCK ... WAIT: %q", r)
	}
	if r := rootWaiter.do("BLPOP", "orders:list", "0.2"); r != "(nil)" {
		t.Fatalf("the default user's BLPOP: %q", r)
	}
}
