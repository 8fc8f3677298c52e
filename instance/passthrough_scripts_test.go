package instance_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// dataScript is an application's script the lock service would refuse
// (OBJECT is no lock script's command).
const dataScript = `redis.call('INCR', KEYS[1]) return redis.call('OBJECT', 'ENCODING', KEYS[1])`

// TestPassthroughScriptsNoLockKeys: without lock_keys, a catalogued lock
// script goes to the lock service, every other script to the data Redis,
// by EVAL, by EVALSHA after SCRIPT LOAD and by go-redis's EVALSHA-then-EVAL.
func TestPassthroughScriptsNoLockKeys(t *testing.T) {
	p := startPassthrough(t)
	ctx := context.Background()
	c := newClient(t, p.in.Addr(), 2)
	d := newClient(t, p.data.Addr(), 2)

	if got, err := c.Eval(ctx, dataScript, []string{"counter"}).Result(); err != nil || got != "int" {
		t.Fatalf("EVAL of a data script: %v, %v", got, err)
	}
	sha, err := c.ScriptLoad(ctx, dataScript).Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD of a data script: %v", err)
	}
	if got, err := c.EvalSha(ctx, sha, []string{"counter"}).Result(); err != nil || got != "int" {
		t.Fatalf("EVALSHA of a data script: %v, %v", got, err)
	}
	if got, err := redis.NewScript(dataScript).Run(ctx, c, []string{"counter"}).Result(); err != nil || got != "int" {
		t.Fatalf("go-redis Script.Run of a data script: %v, %v", got, err)
	}
	if n := d.Get(ctx, "counter").Val(); n != "3" {
		t.Fatalf("the data Redis's counter is %q after three runs, want 3", n)
	}
	if p.onLockNodes("counter") != 0 {
		t.Fatal("a data script ran on the lock nodes")
	}

	if ok, err := c.SetNX(ctx, "job", "tok", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v, %v", ok, err)
	}
	release := redis.NewScript(releaseScript) // EVALSHA, then EVAL on NOSCRIPT
	if got, err := release.Run(ctx, c, []string{"job"}, "tok").Int(); err != nil || got != 1 {
		t.Fatalf("catalogued release: %v, %v", got, err)
	}
	p.waitOffLockNodes(t, "job", "the release reached every lock node")
	if ok, err := c.SetNX(ctx, "job", "tok2", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX after the release: %v, %v", ok, err)
	}
	// Now cached on the lock side: EVALSHA goes there at once.
	if got, err := c.EvalSha(ctx, release.Hash(), []string{"job"}, "tok2").Int(); err != nil || got != 1 {
		t.Fatalf("EVALSHA of the catalogued release: %v, %v", got, err)
	}
	if d.Exists(ctx, "job").Val() != 0 {
		t.Fatal("the lock reached the data Redis")
	}
}

// TestPassthroughScriptLoadWithLockKeys: with lock_keys, EVAL goes by its
// keys, and SCRIPT LOAD of a script the lock service cannot run goes to the
// data Redis, so the application's EVALSHA on data keys finds it there.
func TestPassthroughScriptLoadWithLockKeys(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	c := newClient(t, p.in.Addr(), 2)
	d := newClient(t, p.data.Addr(), 2)
	sha, err := c.ScriptLoad(ctx, dataScript).Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD of a data script: %v", err)
	}
	if got, err := c.EvalSha(ctx, sha, []string{"counter"}).Result(); err != nil || got != "int" {
		t.Fatalf("EVALSHA of the loaded data script: %v, %v", got, err)
	}
	if n := d.Get(ctx, "counter").Val(); n != "1" {
		t.Fatalf("the data Redis's counter is %q, want 1", n)
	}
	if err := c.Eval(ctx, dataScript, []string{"lock:a"}).Err(); err == nil {
		t.Fatal("a script the lock service refuses ran on a lock key")
	}
	if ok, err := c.SetNX(ctx, "lock:a", "tok", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX lock:a: %v, %v", ok, err)
	}
	if got, err := c.Eval(ctx, releaseScript, []string{"lock:a"}, "tok").Int(); err != nil || got != 1 {
		t.Fatalf("catalogued release of lock:a: %v, %v", got, err)
	}
	if d.Exists(ctx, "lock:a").Val() != 0 {
		t.Fatal("lock:a went to the data Redis")
	}
	p.waitOffLockNodes(t, "lock:a", "lock:a off the lock nodes after its release")
}

// TestPassthroughLockChannels: with lock_keys naming a lock library's
// channels, a waiter's SUBSCRIBE is served through the lock nodes, where
// the library's unlock script publishes, while other channels stay on the
// data Redis; one connection cannot subscribe on both sides.
func TestPassthroughLockChannels(t *testing.T) {
	p := startPassthrough(t, "orders-lock", "redisson_lock__channel:*")
	ctx := context.Background()
	c := newClient(t, p.in.Addr(), 2)

	waiter := c.Subscribe(ctx, "redisson_lock__channel:{orders-lock}")
	defer waiter.Close()
	if _, err := waiter.Receive(ctx); err != nil {
		t.Fatalf("SUBSCRIBE to a lock channel: %v", err)
	}
	data := c.Subscribe(ctx, "news")
	defer data.Close()
	if _, err := data.Receive(ctx); err != nil {
		t.Fatalf("SUBSCRIBE to a data channel: %v", err)
	}

	// An unlock script outside the catalog publishes on the lock nodes.
	unlock := `if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[2]); return 1 end return 0`
	if ok, err := c.SetNX(ctx, "orders-lock", "tok", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v, %v", ok, err)
	}
	if got, err := c.Eval(ctx, unlock, []string{"orders-lock", "redisson_lock__channel:{orders-lock}"}, "tok", "0").Int(); err != nil || got != 1 {
		t.Fatalf("unlock script: %v, %v", got, err)
	}
	msgCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := waiter.ReceiveMessage(msgCtx)
	if err != nil || m.Payload != "0" {
		t.Fatalf("the waiter heard %v, %v; want the unlock message", m, err)
	}
	if n, err := newClient(t, p.data.Addr(), 2).Publish(ctx, "news", "hello").Result(); err != nil || n != 1 {
		t.Fatalf("PUBLISH on the data Redis reached %d subscribers, %v; want the relayed one", n, err)
	}
	if m, err := data.ReceiveMessage(msgCtx); err != nil || m.Payload != "hello" {
		t.Fatalf("the data subscriber heard %v, %v", m, err)
	}

	// One connection, one side.
	conn := c.Conn()
	defer conn.Close()
	if err := conn.Do(ctx, "SUBSCRIBE", "news", "redisson_lock__channel:{x}").Err(); err == nil {
		t.Fatal("SUBSCRIBE naming a data channel and a lock channel was taken")
	}
}
