package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/push"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// Issue 12.6: a holder is told at once when its lock is lost or taken from
// it — a RESP3 push ">3 locklost <key> <reason>" — and every holder gets
// -LOCKLOST on its next command about the key, once.

// dialRESP3 is a raw connection that said HELLO 3.
func dialRESP3(t *testing.T, addr string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	if r := c.do("HELLO", "3"); !strings.HasPrefix(r, "[server") {
		t.Fatalf("HELLO 3: %s", r)
	}
	return c
}

// push reads what the server sends unasked and fails unless it is a push.
func (r *rawConn) push() string {
	r.t.Helper()
	p := r.reply()
	if !strings.HasPrefix(p, ">[") {
		r.t.Fatalf("got %q, want a push", p)
	}
	return p
}

// lostPush is the push that tells of key's loss for reason.
func lostPush(key, reason string) string { return ">[locklost " + key + " " + reason + "]" }

// TestDelTellsHolder: a DEL from another connection takes a bound lock and
// a lease from their holder. The RESP3 holder is pushed the news without
// sending anything; the RESP2 holder's next command about the key gets
// -LOCKLOST; each hears of it once; a RENEW with the lease's token from
// any connection gets -LOCKLOST too. A lock taken with SET NX is how
// legacy code locks, and DEL from any pooled connection how it unlocks:
// its holder hears what Redis would say, nothing.
func TestDelTellsHolder(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		key := uniqueKey(t)
		h3 := dialRESP3(t, in.Addr())
		h2 := dialRaw(t, in.Addr())
		other := dialRaw(t, in.Addr())
		parseGrant(t, h3.do("LOCK", key+":bound"))
		parseGrant(t, h3.do("LOCK", key+":lease", "PX", "60000", "TOKEN", "tok"))
		if r := h3.do("SET", key+":legacy", "tok", "NX", "PX", "60000"); r != "+OK" {
			t.Fatalf("SET NX PX: %s", r)
		}
		parseGrant(t, h2.do("LOCK", key+":two"))
		if r := h2.do("SETNX", key+":legacy2", "1"); r != ":1" {
			t.Fatalf("SETNX: %s", r)
		}

		if r := other.do("DEL", key+":bound", key+":lease", key+":two", key+":legacy", key+":legacy2"); r != ":5" {
			t.Fatalf("DEL: %s", r)
		}
		got := map[string]bool{h3.push(): true, h3.push(): true}
		for _, want := range []string{lostPush(key+":bound", "deleted"), lostPush(key+":lease", "deleted")} {
			if !got[want] {
				t.Fatalf("pushes %v, want %s", got, want)
			}
		}
		for _, c := range []struct {
			conn *rawConn
			cmd  []string
			want string
		}{
			{h3, []string{"GET", key + ":bound"}, "-LOCKLOST the lock on '" + key + ":bound' was lost: another connection deleted it"},
			{h3, []string{"GET", key + ":bound"}, "(nil)"},
			{other, []string{"RENEW", key + ":lease", "tok"}, "-LOCKLOST the lock on '" + key + ":lease' was lost: another connection deleted it"},
			{h3, []string{"GET", key + ":lease"}, "(nil)"},
			{h2, []string{"TTL", key + ":two"}, "-LOCKLOST the lock on '" + key + ":two' was lost: another connection deleted it"},
			{h2, []string{"TTL", key + ":two"}, ":-2"},
			{h3, []string{"GET", key + ":legacy"}, "(nil)"}, // a push would be read here instead
			{h2, []string{"EXISTS", key + ":legacy2"}, ":0"},
		} {
			if r := c.conn.do(c.cmd...); !strings.HasPrefix(r, c.want) {
				t.Fatalf("%v: %q, want %q", c.cmd, r, c.want)
			}
		}
	})
}

// lostHandler hands go-redis's locklost pushes to a channel.
type lostHandler chan []any

func (h lostHandler) HandlePushNotification(_ context.Context, _ push.NotificationHandlerContext, n []any) error {
	select {
	case h <- n:
	default:
	}
	return nil
}

// TestGoRedisHearsLostLock: go-redis v9 on RESP3 reads the push apart
// from its replies — the next reply is the command's own — and hands it to
// a handler registered for "locklost"; GET then says LOCKLOST, once.
func TestGoRedisHearsLostLock(t *testing.T) {
	in, _ := startRedlock(t, 3)
	key := uniqueKey(t)
	holder := redis.NewClient(&redis.Options{Addr: in.Addr(), Protocol: 3, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { holder.Close() })
	heard := make(lostHandler, 4)
	if err := holder.RegisterPushNotificationHandler("locklost", heard, false); err != nil {
		t.Fatal(err)
	}
	mustLock(t, holder, key)
	if n, err := newClient(t, in.Addr(), 3).Del(context.Background(), key).Result(); n != 1 || err != nil {
		t.Fatalf("DEL: %d %v", n, err)
	}
	ctx := context.Background()
	var n []any
	eventually(t, 10*time.Second, "the handler hears the push", func() bool {
		if s, err := holder.Echo(ctx, "in order").Result(); s != "in order" || err != nil {
			t.Fatalf("ECHO: %q %v: a reply out of step", s, err)
		}
		select {
		case n = <-heard:
			return true
		default:
			return false
		}
	})
	if len(n) != 3 || n[0] != "locklost" || n[1] != key || n[2] != "deleted" {
		t.Fatalf("push %v", n)
	}
	if _, err := holder.Get(ctx, key).Result(); err == nil || !strings.HasPrefix(err.Error(), "LOCKLOST") {
		t.Fatalf("GET after the loss: %v, want LOCKLOST", err)
	}
	if _, err := holder.Get(ctx, key).Result(); err != redis.Nil {
		t.Fatalf("GET again: %v, want nil", err)
	}
}

// TestDelThroughAnotherInstanceTellsHolder: a DEL through a second
// instance on the same nodes takes a bound lock and a lease held through
// the first. The second announces it on the nodes (the first would find
// the bound lock gone on its next renewal anyway, but no instance renews a
// lease): the RESP3 holder is pushed both, the RESP2 holder's GET says
// LOCKLOST.
func TestDelThroughAnotherInstanceTellsHolder(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	a := startInstance(t, testConfig(nodes))
	b := startInstance(t, testConfig(nodes))
	key := uniqueKey(t)
	h3 := dialRESP3(t, a.Addr())
	h2 := dialRaw(t, a.Addr())
	parseGrant(t, h3.do("LOCK", key+":bound"))
	parseGrant(t, h3.do("LOCK", key+":lease", "PX", "60000"))
	parseGrant(t, h2.do("LOCK", key+":2", "PX", "60000"))
	if r := dialRaw(t, b.Addr()).do("DEL", key+":bound", key+":lease", key+":2"); r != ":3" {
		t.Fatalf("DEL through the other instance: %s", r)
	}
	got := map[string]bool{h3.push(): true, h3.push(): true}
	if !got[lostPush(key+":lease", "deleted")] || !got[lostPush(key+":bound", "deleted")] && !got[lostPush(key+":bound", "gone")] {
		t.Fatalf("pushes %v", got)
	}
	eventually(t, 10*time.Second, "the RESP2 holder hears of it", func() bool {
		r := h2.do("GET", key+":2")
		if r != "(nil)" && !strings.HasPrefix(r, "-LOCKLOST") {
			t.Fatalf("GET: %s", r)
		}
		return strings.HasPrefix(r, "-LOCKLOST the lock on '"+key+":2' was lost: another connection deleted it")
	})
}

// TestRenewalFailureTellsHolder: with 2 of 3 nodes paused past the bound
// lease, renewals fail and the lock is lost: the RESP3 holder is pushed it
// while the nodes are still paused, and the RESP2 holder's first command
// about the key after they resume says LOCKLOST.
func TestRenewalFailureTellsHolder(t *testing.T) {
	in, nodes := startRedlock(t, 3)
	key := uniqueKey(t)
	h3 := dialRESP3(t, in.Addr())
	h2 := dialRaw(t, in.Addr())
	parseGrant(t, h3.do("LOCK", key+":3"))
	parseGrant(t, h2.do("LOCK", key+":2"))
	pause(t, nodes[0])
	pause(t, nodes[1])
	if p := h3.push(); p != lostPush(key+":3", "renewal failed") {
		t.Fatalf("push %s", p)
	}
	info := dialRaw(t, in.Addr())
	eventually(t, 10*time.Second, "both losses counted", func() bool {
		return strings.Contains(info.do("INFO", "locks"), "locks_lost:2")
	})
	resume(t, nodes[0])
	resume(t, nodes[1])
	if r := h2.do("PTTL", key+":2"); !strings.HasPrefix(r, "-LOCKLOST the lock on '"+key+":2' was lost: renewals failed") {
		t.Fatalf("PTTL after the loss: %s", r)
	}
}

// TestSessionExpiryTellsHolder: the instance is cut off from ZooKeeper
// past its session: its bound locks are lost (the watchdog gives them up
// before the session expires on the ensemble). The RESP3 holder is pushed
// it during the cut; the RESP2 holder's GET says LOCKLOST after it.
func TestSessionExpiryTellsHolder(t *testing.T) {
	zk := zktest.Start(t)
	proxy := zktest.NewProxy(t, zk.Addr())
	cfg := zkConfig(zk)
	cfg.ZooKeeper.Servers = []string{proxy.Addr()}
	in := startInstance(t, cfg)
	key := uniqueKey(t)
	h3 := dialRESP3(t, in.Addr())
	h2 := dialRaw(t, in.Addr())
	parseGrant(t, h3.do("LOCK", key+":3"))
	parseGrant(t, h2.do("LOCK", key+":2"))
	proxy.Cut()
	p := h3.push()
	if p != lostPush(key+":3", "renewal failed") && p != lostPush(key+":3", "session expired") {
		t.Fatalf("push %s", p)
	}
	proxy.Restore()
	eventually(t, 20*time.Second, "the RESP2 holder hears of it", func() bool {
		r := h2.do("GET", key+":2")
		if r == key+":2" || strings.HasPrefix(r, "[") {
			t.Fatalf("GET: %s", r)
		}
		return strings.HasPrefix(r, "-LOCKLOST the lock on '"+key+":2' was lost")
	})
}

// TestDelThroughAnotherZooKeeperInstanceTellsHolder: on ZooKeeper, leases
// are persistent nodes that no instance renews; a DEL through a second
// instance on the same ensemble deletes one granted through the first —
// even after an extension through the second, which then answers for the
// node too — and leaves a mark that the first watches for and tells the
// holder of: the RESP3 holder is pushed it, the RESP2 holder's next
// command about the key says LOCKLOST, once. A bound lock is marked too
// (or its watchdog finds it gone first). A lease that runs out, or that
// its holder releases (through either instance), is no loss: the first
// push the RESP3 holder gets after those is of a later DEL.
func TestDelThroughAnotherZooKeeperInstanceTellsHolder(t *testing.T) {
	zk := zktest.Start(t)
	a := startInstance(t, zkConfig(zk))
	b := startInstance(t, zkConfig(zk))
	key := uniqueKey(t)
	h3 := dialRESP3(t, a.Addr())
	h2 := dialRaw(t, a.Addr())
	viaB := dialRaw(t, b.Addr())
	parseGrant(t, h3.do("LOCK", key+":bound"))
	parseGrant(t, h3.do("LOCK", key+":lease", "PX", "60000", "TOKEN", "lease"))
	parseGrant(t, h2.do("LOCK", key+":2", "PX", "60000"))
	// Extensions through either instance: the second then answers for
	// the node too (its DEL takes the one-request path).
	if r := viaB.do("RENEW", key+":lease", "lease", "PX", "60000"); !strings.HasPrefix(r, ":") {
		t.Fatalf("RENEW through the other instance: %s", r)
	}
	if r := h3.do("RENEW", key+":lease", "lease", "PX", "60000"); !strings.HasPrefix(r, ":") {
		t.Fatalf("RENEW: %s", r)
	}
	if r := viaB.do("DEL", key+":bound", key+":lease", key+":2"); r != ":3" {
		t.Fatalf("DEL through the other instance: %s", r)
	}
	got := map[string]bool{h3.push(): true, h3.push(): true}
	if !got[lostPush(key+":lease", "deleted")] || !got[lostPush(key+":bound", "deleted")] && !got[lostPush(key+":bound", "gone")] {
		t.Fatalf("pushes %v", got)
	}
	eventually(t, 20*time.Second, "the RESP2 holder hears of it", func() bool {
		r := h2.do("GET", key+":2")
		if r != "(nil)" && !strings.HasPrefix(r, "-LOCKLOST") {
			t.Fatalf("GET: %s", r)
		}
		return strings.HasPrefix(r, "-LOCKLOST the lock on '"+key+":2' was lost: another connection deleted it")
	})
	if r := h2.do("GET", key+":2"); r != "(nil)" {
		t.Fatalf("GET again: %s, want (nil): LOCKLOST is said once", r)
	}

	// No loss: a lease that runs out (and is then taken through the other
	// instance, which may delete the overdue node itself), and leases
	// their holder releases, here and through the other instance.
	parseGrant(t, h3.do("LOCK", key+":short", "PX", "200", "TOKEN", "short"))
	parseGrant(t, h3.do("LOCK", key+":here", "PX", "60000", "TOKEN", "here"))
	parseGrant(t, h3.do("LOCK", key+":there", "PX", "60000", "TOKEN", "there"))
	if r := h3.do("UNLOCK", key+":here", "here"); r != ":1" {
		t.Fatalf("UNLOCK here: %s", r)
	}
	if r := viaB.do("UNLOCK", key+":there", "there"); r != ":1" {
		t.Fatalf("UNLOCK through the other instance: %s", r)
	}
	eventually(t, 20*time.Second, "the other instance takes the lease that ran out", func() bool {
		return strings.HasPrefix(viaB.do("LOCK", key+":short", "PX", "60000"), "[")
	})
	// The marker: a later DEL through the other instance, whose push must
	// be the first one.
	parseGrant(t, h3.do("LOCK", key+":last", "PX", "60000"))
	if r := viaB.do("DEL", key+":last"); r != ":1" {
		t.Fatalf("DEL the last: %s", r)
	}
	if p := h3.push(); p != lostPush(key+":last", "deleted") {
		t.Fatalf("push %s, want only the last lease's", p)
	}
	for _, k := range []string{":short", ":here", ":there"} {
		if r := h3.do("GET", key+k); strings.HasPrefix(r, "-LOCKLOST") || strings.HasPrefix(r, ">") {
			t.Fatalf("GET %s: %s, want no loss", k, r)
		}
	}
}
