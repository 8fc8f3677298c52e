package instance_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Transactions (issue 28 §3). Each check runs first against one plain
// redis-server, which proves the check, then through lockproxy on the
// embedded backend and on every backend of eachBackend. On the old main
// MULTI, EXEC and DISCARD were unknown commands and the commands between
// them ran at once: each check below failed there with a lock left held.

// txTargets runs check as "redis", then through lockproxy on the embedded
// backend and on each backend of eachBackend.
func txTargets(t *testing.T, check func(t *testing.T, addr string)) {
	t.Run("redis", func(t *testing.T) { check(t, redistest.Start(t, redistest.Options{}).Addr()) })
	t.Run("embedded", func(t *testing.T) { check(t, startInstance(t, embeddedConfig()).Addr()) })
	eachBackend(t, func(t *testing.T, cfg instance.Config) { check(t, startInstance(t, cfg).Addr()) })
}

// heldBy is the token GET reads for key, "" when the key is free.
func heldBy(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// TestMultiGoRedisTxPipelined: go-redis's TxPipelined(SetNX) takes the lock
// and says so; a second one on the held key says false and changes nothing.
// Old main: TxPipelined returned an error and SetNX false while the lock was
// taken.
func TestMultiGoRedisTxPipelined(t *testing.T) {
	txTargets(t, func(t *testing.T, addr string) {
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) { txSetNX(t, addr, proto) })
		}
	})
}

// txSetNX is TestMultiGoRedisTxPipelined over protocol proto.
func txSetNX(t *testing.T, addr string, proto int) {
	ctx := compatCtx(t)
	c := newClient(t, addr, proto)
	key := uniqueKey(t)
	var first, second *redis.BoolCmd
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		first = p.SetNX(ctx, key, "tok-a", 30*time.Second)
		return nil
	})
	if err != nil || !first.Val() {
		t.Fatalf("TxPipelined(SetNX) on a free key: %v, %v", first.Val(), err)
	}
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		second = p.SetNX(ctx, key, "tok-b", 30*time.Second)
		return nil
	})
	if err != nil || second.Val() {
		t.Fatalf("TxPipelined(SetNX) on a held key: %v, %v", second.Val(), err)
	}
	if got := heldBy(t, c, key); got != "tok-a" {
		t.Fatalf("holder %q, want tok-a", got)
	}
}

// TestMultiDiscardRunsNothing: MULTI, SET NX, DISCARD leaves the key free.
// Old main: the SET ran and the lock stayed taken for its TTL.
func TestMultiDiscardRunsNothing(t *testing.T) {
	txTargets(t, func(t *testing.T, addr string) {
		r := dialRaw(t, addr)
		key := uniqueKey(t)
		want := []struct {
			cmd   []string
			reply string
		}{
			{[]string{"MULTI"}, "+OK"},
			{[]string{"SET", key, "tok", "NX", "PX", "30000"}, "+QUEUED"},
			{[]string{"DISCARD"}, "+OK"},
			{[]string{"GET", key}, "(nil)"},
		}
		for _, w := range want {
			if got := r.do(w.cmd...); got != w.reply {
				t.Fatalf("%v: %q, want %q", w.cmd, got, w.reply)
			}
		}
	})
}

// TestMultiQueueErrors: Redis 7's queue-time errors, EXECABORT, and the
// errors of MULTI, EXEC, DISCARD and WATCH out of place; nothing of an
// aborted transaction runs. Old main: all unknown commands, SET ran.
func TestMultiQueueErrors(t *testing.T) {
	txTargets(t, func(t *testing.T, addr string) {
		r := dialRaw(t, addr)
		key := uniqueKey(t)
		steps := [][2]string{
			{"EXEC", "-ERR EXEC without MULTI"},
			{"DISCARD", "-ERR DISCARD without MULTI"},
			{"MULTI", "+OK"},
			{"MULTI", "-ERR MULTI calls can not be nested"},
			{"SET " + key + " tok NX PX 30000", "+QUEUED"},
			{"WATCH " + key, "-ERR WATCH inside MULTI is not allowed"},
			{"NOSUCHCOMMAND a", "-ERR unknown command 'NOSUCHCOMMAND', with args beginning with: 'a' "},
			{"GET", "-ERR wrong number of arguments for 'get' command"},
			{"EXEC", "-EXECABORT Transaction discarded because of previous errors."},
			{"GET " + key, "(nil)"},
			{"MULTI", "+OK"},
			{"SET " + key + " tok NX PX 30000", "+QUEUED"},
			{"EXEC extra", "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command"},
			{"GET " + key, "(nil)"},
			{"EXEC", "-ERR EXEC without MULTI"},
		}
		for _, s := range steps {
			if got := r.do(strings.Fields(s[0])...); got != s[1] {
				t.Fatalf("%s: %q, want %q", s[0], got, s[1])
			}
		}
	})
}

// TestMultiExecReplies: EXEC runs the queue in order and replies the array
// of the replies, a command's error among them; WATCH inside MULTI does not
// abort it.
func TestMultiExecReplies(t *testing.T) {
	txTargets(t, func(t *testing.T, addr string) {
		ctx := compatCtx(t)
		c := newClient(t, addr, 2)
		key := uniqueKey(t)
		cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SetNX(ctx, key, "tok", 30*time.Second)
			p.Get(ctx, key)
			p.SetNX(ctx, key, "other", 30*time.Second)
			p.Del(ctx, key)
			p.Exists(ctx, key)
			return nil
		})
		if err != nil || len(cmds) != 5 {
			t.Fatalf("TxPipelined: %d replies, %v", len(cmds), err)
		}
		got := []any{cmds[0].(*redis.BoolCmd).Val(), cmds[1].(*redis.StringCmd).Val(), cmds[2].(*redis.BoolCmd).Val(),
			cmds[3].(*redis.IntCmd).Val(), cmds[4].(*redis.IntCmd).Val()}
		want := []any{true, "tok", false, int64(1), int64(0)}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("EXEC replies %v, want %v", got, want)
			}
		}
	})
}

// TestMultiWatch: WATCH makes EXEC reply null once the watched lock key
// changed holder (another client took it, or its holder released it), and
// run when nothing changed; UNWATCH and EXEC forget the watch.
func TestMultiWatch(t *testing.T) {
	txTargets(t, func(t *testing.T, addr string) {
		r, other := dialRaw(t, addr), dialRaw(t, addr)
		key := uniqueKey(t)
		steps := []struct {
			on   *rawConn
			cmd  string
			want string
		}{
			{r, "WATCH " + key, "+OK"},
			{other, "SET " + key + " theirs NX PX 30000", "+OK"},
			{r, "MULTI", "+OK"},
			{r, "SET " + key + " mine NX PX 30000", "+QUEUED"},
			{r, "EXEC", "(nil)"},
			{r, "WATCH " + key, "+OK"},
			{other, "DEL " + key, ":1"},
			{r, "MULTI", "+OK"},
			{r, "SET " + key + " mine NX PX 30000", "+QUEUED"},
			{r, "EXEC", "(nil)"},
			{r, "GET " + key, "(nil)"},
			{r, "WATCH " + key, "+OK"},
			{r, "MULTI", "+OK"},
			{r, "SET " + key + " mine NX PX 30000", "+QUEUED"},
			{r, "EXEC", "[+OK]"},
			{r, "WATCH " + key, "+OK"},
			{r, "UNWATCH", "+OK"},
			{r, "DEL " + key, ":1"},
			{r, "MULTI", "+OK"},
			{r, "SET " + key + " again NX PX 30000", "+QUEUED"},
			{r, "EXEC", "[+OK]"},
		}
		for i, s := range steps {
			if got := s.on.do(strings.Fields(s.cmd)...); got != s.want {
				t.Fatalf("step %d %s: %q, want %q", i, s.cmd, got, s.want)
			}
		}
	})
}

// TestMultiRedisCLI: a transaction typed into redis-cli.
func TestMultiRedisCLI(t *testing.T) {
	txTargets(t, func(t *testing.T, addr string) {
		key := uniqueKey(t)
		script := "MULTI\nSET " + key + " tok NX PX 30000\nGET " + key + "\nEXEC\nMULTI\nSET " + key + " other NX PX 30000\nDISCARD\nGET " + key + "\n"
		got := strings.Join(redisCLI(t, addr, script), "|")
		want := "OK|QUEUED|QUEUED|OK|tok|OK|QUEUED|OK|tok"
		if got != want {
			t.Fatalf("redis-cli transcript %q, want %q", got, want)
		}
	})
}

// TestMultiRedisPy: redis-py's default pipeline() (a transaction) with SET
// NX PX, and a WATCH pipeline (testdata/compat/python/tx.py).
func TestMultiRedisPy(t *testing.T) {
	if out, err := exec.Command(systemPython, "-c", "import redis").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import redis (apt-get install python3-redis): %v\n%s", systemPython, err, out)
	}
	txTargets(t, func(t *testing.T, addr string) {
		compatRunSteps(t, 5, "testdata/compat/python", systemPython, "tx.py", addr, uniqueKey(t))
	})
}

// TestMultiIoredis: ioredis multi().set(... "NX").exec() and discard()
// (testdata/compat/node/tx.js).
func TestMultiIoredis(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	if nodeModulesStale() != "" {
		npmCI(t)
	}
	txTargets(t, func(t *testing.T, addr string) {
		compatRunSteps(t, 4, nodeCompatDir, node, "tx.js", addr, uniqueKey(t))
	})
}

// TestMultiPassthrough: with a data Redis, a transaction runs there (issue
// 27's rule): data commands queue and run on the data Redis, a lock command
// inside it is refused at queue time and EXEC aborts, so the client is told
// it failed and no lock is held anywhere; WATCH of a lock key is refused.
// Without lock_keys, SET NX is the lock command.
func TestMultiPassthrough(t *testing.T) {
	for _, lockKeys := range [][]string{{"lock:*"}, nil} {
		t.Run(strings.Join(append([]string{"lock_keys"}, lockKeys...), "="), func(t *testing.T) {
			p := startPassthrough(t, lockKeys...)
			ctx := compatCtx(t)
			c := newClient(t, p.in.Addr(), 2)
			data := newClient(t, p.data.Addr(), 2)
			lockKey, dataKey := "lock:"+uniqueKey(t), "data:"+uniqueKey(t)
			cmds, err := c.TxPipelined(ctx, func(pl redis.Pipeliner) error {
				pl.Incr(ctx, dataKey)
				pl.Incr(ctx, dataKey)
				return nil
			})
			if err != nil || cmds[1].(*redis.IntCmd).Val() != 2 || data.Get(ctx, dataKey).Val() != "2" {
				t.Fatalf("data transaction: %v, data Redis has %q", err, data.Get(ctx, dataKey).Val())
			}
			var setnx *redis.BoolCmd
			_, err = c.TxPipelined(ctx, func(pl redis.Pipeliner) error {
				pl.Incr(ctx, dataKey)
				setnx = pl.SetNX(ctx, lockKey, "tok", 30*time.Second)
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), "EXECABORT") || setnx.Val() {
				t.Fatalf("transaction with a lock command: SetNX %v, %v; want EXECABORT", setnx.Val(), err)
			}
			if n := p.onLockNodes(lockKey); n != 0 || data.Exists(ctx, lockKey).Val() != 0 || data.Get(ctx, dataKey).Val() != "2" {
				t.Fatalf("after EXECABORT: lock on %d nodes, on the data Redis %d, data %q", n, data.Exists(ctx, lockKey).Val(), data.Get(ctx, dataKey).Val())
			}
			if lockKeys != nil {
				if err := c.Watch(ctx, func(*redis.Tx) error { return nil }, lockKey); err == nil || !strings.Contains(err.Error(), "WATCH of a lock key") {
					t.Fatalf("WATCH of a lock key: %v", err)
				}
			}
		})
	}
}

// TestMultiBlockingAndRefused: inside a transaction LOCK ... WAIT tries
// once (as Redis runs a blocking command inside MULTI without blocking);
// BLPOP, SUBSCRIBE and CLIENT REPLY cannot join one (EXEC aborts); RESET
// drops the transaction; RESP3's EXEC after a watched change is null.
func TestMultiBlockingAndRefused(t *testing.T) {
	in := startInstance(t, embeddedConfig())
	r, holder := dialProto(t, in.Addr(), 3), dialRaw(t, in.Addr())
	key := uniqueKey(t)
	steps := []struct {
		on        *rawConn
		cmd, want string
	}{
		{holder, "SET " + key + " theirs NX PX 30000", "+OK"},
		{r, "MULTI", "+OK"},
		{r, "LOCK " + key + " PX 30000 WAIT 0", "+QUEUED"},
		{r, "EXEC", "[(nil)]"}, // WAIT 0 would block for ever outside a transaction
		{r, "MULTI", "+OK"},
		{r, "BLPOP somelist 0", "-ERR lockproxy: 'blpop' cannot join a transaction"},
		{r, "SUBSCRIBE ch", "-ERR lockproxy: 'subscribe' cannot join a transaction"},
		{r, "CLIENT REPLY OFF", "-ERR lockproxy: 'client' cannot join a transaction"},
		{r, "EXEC", "-EXECABORT Transaction discarded because of previous errors."},
		{r, "MULTI", "+OK"},
		{r, "SET " + key + ":2 mine NX PX 30000", "+QUEUED"},
		{r, "RESET", "+RESET"},
		{r, "EXEC", "-ERR EXEC without MULTI"},
		{r, "GET " + key + ":2", "(nil)"},
		{r, "HELLO 3", "[server …"},
		{r, "WATCH " + key, "+OK"},
		{holder, "DEL " + key, ":1"},
		{r, "MULTI", "+OK"},
		{r, "GET " + key, "+QUEUED"},
		{r, "EXEC", "(nil)"},
	}
	for i, s := range steps {
		got := s.on.do(strings.Fields(s.cmd)...)
		if prefix, ok := strings.CutSuffix(s.want, "…"); ok && strings.HasPrefix(got, prefix) || got == s.want {
			continue
		}
		t.Fatalf("step %d %s: %q, want %q", i, s.cmd, got, s.want)
	}
}

// TestMultiWatchFence: what "changed" means for a watched lock key. The
// same token granted again after an UNLOCK has a new fencing token: changed,
// EXEC replies null. A RENEW by the holder is the same grant: EXEC runs.
// (The re-grant follows an UNLOCK, not an expiry: a lease that LOCKINFO
// already calls free may still be on a minority of nodes, where the same
// token's LOCK is the idempotent retry that keeps its fence.)
func TestMultiWatchFence(t *testing.T) {
	check := func(t *testing.T, addr string) {
		r, holder := dialRaw(t, addr), dialRaw(t, addr)
		key := uniqueKey(t)
		if got := holder.do("LOCK", key, "PX", "30000", "TOKEN", "tok"); !strings.HasPrefix(got, "[tok ") {
			t.Fatalf("LOCK: %q", got)
		}
		must := func(c *rawConn, want string, args ...string) {
			t.Helper()
			if got := c.do(args...); got != want {
				t.Fatalf("%v: %q, want %q", args, got, want)
			}
		}
		must(r, "+OK", "WATCH", key)
		must(holder, ":1", "UNLOCK", key, "tok")
		if got := holder.do("LOCK", key, "PX", "30000", "TOKEN", "tok"); !strings.HasPrefix(got, "[tok ") {
			t.Fatalf("LOCK again: %q", got)
		}
		must(r, "+OK", "MULTI")
		must(r, "+QUEUED", "LOCKINFO", key)
		must(r, "(nil)", "EXEC")
		must(r, "+OK", "WATCH", key)
		if got := holder.do("RENEW", key, "tok", "PX", "60000"); !strings.HasPrefix(got, ":") {
			t.Fatalf("RENEW: %q", got)
		}
		must(r, "+OK", "MULTI")
		must(r, "+QUEUED", "UNLOCK", key, "tok")
		must(r, "[:1]", "EXEC")
	}
	t.Run("embedded", func(t *testing.T) { check(t, startInstance(t, embeddedConfig()).Addr()) })
	eachBackend(t, func(t *testing.T, cfg instance.Config) { check(t, startInstance(t, cfg).Addr()) })
}

// TestMultiPassthroughLibraries: with a data Redis and lock_keys, redis-py's
// pipeline() and ioredis's multi() run data transactions on the data Redis,
// and a transaction with a lock command fails as a whole (redis-py raises
// the queue-time error, ioredis rejects with EXECABORT) with no lock held.
func TestMultiPassthroughLibraries(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	host, port, _ := strings.Cut(p.in.Addr(), ":")
	key := uniqueKey(t)
	py := `import redis, sys
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))
k = sys.argv[3]
p = r.pipeline(); p.incr("data:" + k); p.incr("data:" + k)
print("ok data" if p.execute() == [1, 2] else "FAIL data")
p = r.pipeline(); p.incr("data:" + k); p.set("lock:" + k, "tok", nx=True, px=30000)
try:
    p.execute(); print("FAIL lock in a transaction ran")
except redis.exceptions.ResponseError as e:  # the queue-time error, as redis-py raises Redis's own
    print("ok refused: %s" % e)
print("ok not held" if r.get("lock:" + k) is None and r.get("data:" + k) == b"2" else "FAIL held")
`
	out, err := exec.Command(systemPython, "-c", py, host, port, "py:"+key).CombinedOutput()
	if err != nil || okLines(out) != 3 {
		t.Errorf("redis-py through passthrough: %v\n%s", err, out)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	if nodeModulesStale() != "" {
		npmCI(t)
	}
	js := `const Redis = require("ioredis");
const [host, port, k] = process.argv.slice(1);
const r = new Redis({ host, port: Number(port), maxRetriesPerRequest: 0 });
(async () => {
  const d = await r.multi().incr("data:" + k).incr("data:" + k).exec();
  console.log(JSON.stringify(d) === JSON.stringify([[null, 1], [null, 2]]) ? "ok data" : "FAIL data " + JSON.stringify(d));
  const e = await r.multi().incr("data:" + k).set("lock:" + k, "tok", "PX", 30000, "NX").exec().then(() => "", (err) => String(err));
  console.log(e.includes("EXECABORT") ? "ok execabort" : "FAIL " + e);
  console.log((await r.get("lock:" + k)) === null && (await r.get("data:" + k)) === "2" ? "ok not held" : "FAIL held");
  r.disconnect();
})();
`
	cmd := exec.Command(node, "-e", js, host, port, "js:"+key)
	cmd.Dir = nodeCompatDir
	out, err = cmd.CombinedOutput()
	if err != nil || okLines(out) != 3 {
		t.Errorf("ioredis through passthrough: %v\n%s", err, out)
	}
	for _, k := range []string{"lock:py:" + key, "lock:js:" + key} {
		if n := p.onLockNodes(k); n != 0 {
			t.Errorf("%s on %d lock nodes", k, n)
		}
	}
}

// okLines counts the lines of out that start with "ok ".
func okLines(out []byte) int {
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "ok ") {
			n++
		}
	}
	return n
}

// TestMultiACL: a user's permissions are checked when a command is queued,
// as Redis 7 does: a refused command makes EXEC abort, and nothing of the
// transaction runs; WATCH follows the user's key patterns.
func TestMultiACL(t *testing.T) {
	cfg := embeddedConfig()
	cfg.Password = "root-pw"
	cfg.Users = []instance.UserConfig{{Name: "alice", Password: "alice-pw", Keys: []string{"app:*"}, Commands: "native"}}
	in := startInstance(t, cfg)
	r := dialRaw(t, in.Addr())
	key := "app:" + uniqueKey(t)
	for _, s := range [][2]string{
		{"AUTH alice alice-pw", "+OK"},
		{"WATCH other:x", "-NOPERM No permissions to access a key"},
		{"WATCH " + key, "+OK"},
		{"MULTI", "+OK"},
		{"LOCK " + key + " PX 30000", "+QUEUED"},
		{"LOCK other:x PX 30000", "-NOPERM No permissions to access a key"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors."},
		{"LOCKINFO " + key, "(nil)"},
		{"MULTI", "+OK"},
		{"LOCK " + key + " PX 30000", "+QUEUED"},
		{"EXEC", "[[…"},
	} {
		got := r.do(strings.Fields(s[0])...)
		if prefix, ok := strings.CutSuffix(s[1], "…"); ok && strings.HasPrefix(got, prefix) || got == s[1] {
			continue
		}
		t.Fatalf("%s: %q, want %q", s[0], got, s[1])
	}
}
