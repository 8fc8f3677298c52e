package instance_test

import (
	"context"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// killNormalClients kills every normal client of the data Redis at addr
// but the one asking, as a restart or its idle timeout would end them.
func killNormalClients(t *testing.T, addr string) {
	t.Helper()
	c := newClient(t, addr, 2)
	if err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// repliesUntilClose reads r's replies until the server closes the
// connection, and fails the test if it stays open.
func repliesUntilClose(t *testing.T, r *rawConn) []string {
	t.Helper()
	var got []string
	for {
		r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		s, err := readReply(r.rd)
		if err != nil {
			if strings.Contains(err.Error(), "timeout") {
				t.Fatalf("connection still open after %q", got)
			}
			return got
		}
		got = append(got, s)
	}
}

// lostStateCase is a client's connection state on the data Redis (set up
// by before), the data Redis dropping that connection, and the commands
// the client then sends in one write; check sees the data afterwards.
type lostStateCase struct {
	name   string
	before [][]string
	after  string
	check  func(t *testing.T, data *redis.Client, k string)
}

func lostStateCases() []lostStateCase {
	return []lostStateCase{
		{name: "WATCH then MULTI/EXEC", before: [][]string{{"WATCH", "{k}"}, {"GET", "{k}"}},
			after: "MULTI\r\nSET {k} 6\r\nINCR {k}:j\r\nEXEC\r\n",
			check: func(t *testing.T, data *redis.Client, k string) {
				if v := data.Get(context.Background(), k).Val(); v != "7" {
					t.Fatalf("%s = %q after the transaction, want 7: the lost WATCH let the transaction run", k, v)
				}
				if n := data.Exists(context.Background(), k+":j").Val(); n != 0 {
					t.Fatalf("%s:j exists: the transaction ran", k)
				}
			}},
		{name: "SELECT then SET", before: [][]string{{"SELECT", "3"}, {"GET", "{k}"}},
			after: "SET {k}:db 1\r\n",
			check: func(t *testing.T, data *redis.Client, k string) {
				if n := data.Exists(context.Background(), k+":db").Val(); n != 0 {
					t.Fatalf("%s:db was written to database 0 after the client's SELECT 3 was lost", k)
				}
			}},
	}
}

// runLostState runs lc against the Redis address (lockproxy or a plain
// redis-server) in front of data: the client's connection must be closed
// before anything it sends after the loss runs.
func runLostState(t *testing.T, addr, dataAddr string, lc lostStateCase) {
	k := uniqueKey(t)
	data := newClient(t, dataAddr, 2)
	ctx := context.Background()
	if err := data.Set(ctx, k, "5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, addr)
	for _, cmd := range lc.before {
		args := append([]string(nil), cmd...)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "{k}", k)
		}
		if got := r.do(args...); strings.HasPrefix(got, "-") {
			t.Fatalf("%v: %s", args, got)
		}
	}
	killNormalClients(t, dataAddr)
	if err := data.Set(ctx, k, "7", 0).Err(); err != nil { // another client's write
		t.Fatal(err)
	}
	r.send(strings.ReplaceAll(lc.after, "{k}", k))
	for _, got := range repliesUntilClose(t, r) {
		if !strings.HasPrefix(got, "-") {
			t.Fatalf("%q after the data Redis dropped the client's connection: a command ran", got)
		}
	}
	lc.check(t, data, k)
}

// TestPassthroughLostStateClosesClient: a client whose WATCH or SELECT on
// the data Redis was lost with its connection there (CLIENT KILL on the
// data Redis) is closed before its next commands run, as a plain
// redis-server (checked first) closes it. Issue 27 §2.
func TestPassthroughLostStateClosesClient(t *testing.T) {
	plain := redistest.Start(t, redistest.Options{})
	p := startPassthrough(t, "lock:*")
	for _, lc := range lostStateCases() {
		t.Run("redis/"+lc.name, func(t *testing.T) { runLostState(t, plain.Addr(), plain.Addr(), lc) })
		t.Run("lockproxy/"+lc.name, func(t *testing.T) { runLostState(t, p.in.Addr(), p.data.Addr(), lc) })
	}
	if got := infoField(newClient(t, p.in.Addr(), 2).Info(context.Background(), "passthrough").Val(), "clients_closed_state_lost"); got != "2" {
		t.Errorf("clients_closed_state_lost = %q, want 2", got)
	}
}

// TestPassthroughLostWatchRedisPy: redis-py's watch/multi pipeline whose
// connection the data Redis dropped after WATCH raises WatchError, through
// lockproxy as on a plain redis-server (checked first), and writes nothing
// (testdata/compat/python/lostwatch.py).
func TestPassthroughLostWatchRedisPy(t *testing.T) {
	plain := redistest.Start(t, redistest.Options{})
	runPy(t, "lostwatch.py", plain.Addr(), plain.Addr(), uniqueKey(t))
	p := startPassthrough(t, "lock:*")
	runPy(t, "lostwatch.py", p.in.Addr(), p.data.Addr(), uniqueKey(t))
}

// runPy runs a script of testdata/compat/python with Debian's Python and
// fails the test unless it prints "ok" as its last line.
func runPy(t *testing.T, script string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, systemPython, append([]string{script}, args...)...)
	cmd.Dir = "testdata/compat/python"
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "ok" {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
}

// TestPassthroughSlowCommandSharedConnection: client A's command that runs
// past the passthrough timeout (a busy script, as DEBUG SLEEP) is told its
// outcome is unknown; client B's INCR, sent behind it on the same shared
// connection to the data Redis and run once A's ends, gets its reply.
// Issue 27 §3.
func TestPassthroughSlowCommandSharedConnection(t *testing.T) {
	p := startPassthroughWith(t, func(cfg *instance.Config) { cfg.Passthrough.TimeoutMS = 1000 }, "lock:*")
	a, b := sameSharedConn(t, p.in.Addr())
	k := uniqueKey(t)
	info := newClient(t, p.in.Addr(), 2)
	forwarded := func() string {
		return infoField(info.Info(context.Background(), "passthrough").Val(), "forwarded_commands")
	}
	before := forwarded()
	a.send(encodeCommand(busyEval(1500 * time.Millisecond)))
	eventually(t, 10*time.Second, "A's script forwarded", func() bool { return forwarded() != before })
	if got := b.do("INCR", k); got != ":1" {
		t.Fatalf("B's INCR behind A's slow script = %q, want :1", got)
	}
	if got := a.reply(); !strings.HasPrefix(got, "-TIMEOUT outcome unknown") {
		t.Fatalf("A's script past the timeout = %q, want -TIMEOUT outcome unknown", got)
	}
	if got := a.do("GET", k); got != "1" {
		t.Fatalf("A's GET after its timeout = %q, want 1", got)
	}
}

// sameSharedConn dials two lockproxy clients whose plain commands share one
// upstream connection (lockproxy picks it by client id, one per CPU).
func sameSharedConn(t *testing.T, addr string) (*rawConn, *rawConn) {
	a := dialRaw(t, addr)
	idA, _ := strconv.Atoi(strings.TrimPrefix(a.do("CLIENT", "ID"), ":"))
	n := runtime.GOMAXPROCS(0)
	for i := 0; i < 4*n; i++ {
		b := dialRaw(t, addr)
		idB, _ := strconv.Atoi(strings.TrimPrefix(b.do("CLIENT", "ID"), ":"))
		if idA%n == idB%n {
			return a, b
		}
	}
	t.Fatal("no two clients on one shared connection")
	return nil, nil
}

// busyEval is an EVAL that keeps the data Redis busy for d, as DEBUG SLEEP
// does (which redis-server 7 refuses unless enable-debug-command is set).
func busyEval(d time.Duration) []string {
	const src = `local t = redis.call('TIME'); local from = t[1] * 1000000 + t[2]
while true do t = redis.call('TIME'); if t[1] * 1000000 + t[2] - from >= tonumber(ARGV[1]) then return 1 end end`
	return []string{"EVAL", src, "0", strconv.FormatInt(d.Microseconds(), 10)}
}
