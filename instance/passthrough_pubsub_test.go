package instance_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestPassthroughPubSubGoRedis: go-redis's PubSub through lockproxy, in
// RESP2 and RESP3, gets each message published through lockproxy or
// directly on the data Redis exactly once, by channel and by pattern, and
// its PING and UNSUBSCRIBE work.
func TestPassthroughPubSubGoRedis(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	direct := newClient(t, p.data.Addr(), 2)
	for _, proto := range []int{2, 3} {
		c, pub := newClient(t, p.in.Addr(), proto), newClient(t, p.in.Addr(), proto)
		ch, pat := fmt.Sprintf("news:%d", proto), fmt.Sprintf("ev:%d:*", proto)
		ps := c.Subscribe(ctx, ch)
		defer ps.Close()
		if err := ps.PSubscribe(ctx, pat); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // the two confirmations
			if _, err := ps.ReceiveTimeout(ctx, 20*time.Second); err != nil {
				t.Fatalf("resp%d: subscription: %v", proto, err)
			}
		}
		if err := ps.Ping(ctx, "hello"); err != nil {
			t.Fatalf("resp%d: PING while subscribed: %v", proto, err)
		}
		if m, err := ps.ReceiveTimeout(ctx, 20*time.Second); err != nil || fmt.Sprint(m) != "Pong<hello>" {
			t.Fatalf("resp%d: PING while subscribed: %v, %v", proto, m, err)
		}
		if n := pub.Publish(ctx, ch, "via-lockproxy").Val(); n != 1 {
			t.Fatalf("resp%d: PUBLISH through lockproxy reached %d subscribers", proto, n)
		}
		direct.Publish(ctx, ch, "direct")
		direct.Publish(ctx, fmt.Sprintf("ev:%d:1", proto), "by-pattern")
		direct.Publish(ctx, ch, "end")
		var got []string
		for len(got) == 0 || got[len(got)-1] != ch+"=end" {
			m, err := ps.ReceiveTimeout(ctx, 20*time.Second)
			if err != nil {
				t.Fatalf("resp%d: after %q: %v", proto, got, err)
			}
			switch m := m.(type) {
			case *redis.Message:
				got = append(got, m.Channel+"="+m.Payload)
			default:
				got = append(got, fmt.Sprintf("%T", m))
			}
		}
		want := []string{ch + "=via-lockproxy", ch + "=direct", fmt.Sprintf("ev:%d:1=by-pattern", proto), ch + "=end"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("resp%d: received %q, want %q", proto, got, want)
		}
		if err := ps.Unsubscribe(ctx, ch); err != nil {
			t.Fatal(err)
		}
		if m, err := ps.ReceiveTimeout(ctx, 20*time.Second); err != nil || fmt.Sprint(m) != "unsubscribe: "+ch {
			t.Fatalf("resp%d: UNSUBSCRIBE: %v, %v", proto, m, err)
		}
	}
}

// TestPassthroughSubscribedMode: on RESP2, a subscribed connection is
// refused lock commands and data commands with Redis's own error, and
// stays usable; after UNSUBSCRIBE it runs them again. On RESP3 they run
// while subscribed, as on Redis 7. A pipeline entering the mode gets its
// replies in order.
func TestPassthroughSubscribedMode(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	refusal := func(cmd string) string {
		return "-ERR Can't execute '" + cmd + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
	}
	r := dialRaw(t, p.in.Addr())
	r.send("*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n*6\r\n$3\r\nSET\r\n$6\r\nlock:a\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n")
	if got := r.reply(); got != "(nil)" {
		t.Fatalf("GET before SUBSCRIBE in one pipeline: %s", got)
	}
	if got := r.reply(); got != "[subscribe c :1]" {
		t.Fatalf("SUBSCRIBE: %s", got)
	}
	r.send("$5\r\n10000\r\n") // the SET's last argument
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, refusal("set")},
		{[]string{"LOCK", "lock:b", "PX", "10000"}, refusal("lock")},
		{[]string{"GET", "cache"}, refusal("get")},
		{[]string{"ECHO", "x"}, refusal("echo")},
		{[]string{"PING"}, "[pong ]"},
		{[]string{"UNSUBSCRIBE"}, "[unsubscribe c :0]"},
		{[]string{"SET", "lock:a", "v", "NX", "PX", "10000"}, "+OK"},
		{[]string{"SET", "cache", "1"}, "+OK"},
		{[]string{"GET", "cache"}, "1"},
	} {
		got := ""
		if tc.args == nil {
			got = r.reply()
		} else {
			got = r.do(tc.args...)
		}
		if got != tc.want {
			t.Fatalf("%v: %s, want %s", tc.args, got, tc.want)
		}
	}
	if n := p.onLockNodes("lock:a"); n < 2 {
		t.Fatalf("lock:a on %d lock nodes after UNSUBSCRIBE", n)
	}

	r3 := dialRaw(t, p.in.Addr())
	if got := r3.do("HELLO", "3"); !strings.HasPrefix(got, "[") {
		t.Fatalf("HELLO 3: %s", got)
	}
	if got := r3.do("SUBSCRIBE", "c3"); got != ">[subscribe c3 :1]" {
		t.Fatalf("RESP3 SUBSCRIBE: %s", got)
	}
	if got := r3.do("SET", "lock:r3", "v", "NX", "PX", "10000"); got != "+OK" {
		t.Fatalf("RESP3 lock while subscribed: %s", got)
	}
	if got := r3.do("INCR", "n3"); got != ":1" {
		t.Fatalf("RESP3 INCR while subscribed: %s", got)
	}
	newClient(t, p.data.Addr(), 2).Publish(ctx, "c3", "hi")
	if got := r3.reply(); got != ">[message c3 hi]" {
		t.Fatalf("RESP3 message: %s", got)
	}
	if got := r3.do("RESET"); got != "+RESET" {
		t.Fatalf("RESET: %s", got)
	}
	if n := newClient(t, p.data.Addr(), 2).Publish(ctx, "c3", "after").Val(); n != 0 {
		t.Fatalf("PUBLISH after RESET reached %d subscribers", n)
	}
	if got := r3.do("PING"); got != "+PONG" {
		t.Fatalf("PING after RESET: %s", got)
	}
}

// TestPassthroughMonitor: MONITOR through lockproxy relays the data
// Redis's stream of commands, without lockproxy's own barriers, and RESET
// ends it.
func TestPassthroughMonitor(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	m := dialRaw(t, p.in.Addr())
	if got := m.do("MONITOR"); got != "+OK" {
		t.Fatalf("MONITOR: %s", got)
	}
	c := newClient(t, p.in.Addr(), 2)
	if err := c.Set(context.Background(), "watched", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got := m.reply()
	if !strings.Contains(got, `"set" "watched" "v"`) && !strings.Contains(got, `"SET" "watched" "v"`) {
		t.Fatalf("MONITOR line: %s", got)
	}
	if got := m.do("RESET"); got != "+RESET" {
		if strings.Contains(got, "barrier") {
			t.Fatalf("lockproxy's barrier in the stream: %s", got)
		}
		t.Fatalf("RESET: %s", got)
	}
	if got := m.do("GET", "watched"); got != "v" {
		t.Fatalf("GET after RESET: %s", got)
	}
}

// TestPassthroughSubscriberDataRedisGone: when the data Redis dies, a
// subscribed client's connection is closed (its subscriptions are gone;
// clients resubscribe on reconnect), while other clients' locks keep
// working.
func TestPassthroughSubscriberDataRedisGone(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	r := dialRaw(t, p.in.Addr())
	if got := r.do("SUBSCRIBE", "c"); got != "[subscribe c :1]" {
		t.Fatalf("SUBSCRIBE: %s", got)
	}
	if err := p.data.Kill(); err != nil {
		t.Fatal(err)
	}
	if !r.closed() {
		t.Fatal("the subscriber's connection stayed open after the data Redis died")
	}
	c := newClient(t, p.in.Addr(), 2)
	if ok, err := c.SetNX(context.Background(), "lock:after", "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("lock after the data Redis died: %v, %v", ok, err)
	}
}

// TestPassthroughPushesFlowDuringLockWait: a subscribed RESP3 connection
// waiting in LOCK … WAIT still receives its pub/sub messages as they come,
// in order and before the LOCK's reply — Redis 7.0 delivers pushes to a
// client blocked in BLPOP the same way — and the LOCK is then granted once
// the holder releases.
func TestPassthroughPushesFlowDuringLockWait(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	holder, other := dialRaw(t, p.in.Addr()), dialRaw(t, p.in.Addr())
	if got := holder.do("SET", "lock:w", "h", "NX", "PX", "60000"); got != "+OK" {
		t.Fatalf("holder's SET NX: %s", got)
	}
	r := dialRaw(t, p.in.Addr())
	if got := r.do("HELLO", "3"); !strings.HasPrefix(got, "[") {
		t.Fatalf("HELLO 3: %s", got)
	}
	if got := r.do("SUBSCRIBE", "cw"); got != ">[subscribe cw :1]" {
		t.Fatalf("SUBSCRIBE: %s", got)
	}
	r.send("*6\r\n$4\r\nLOCK\r\n$6\r\nlock:w\r\n$2\r\nPX\r\n$5\r\n10000\r\n$4\r\nWAIT\r\n$5\r\n60000\r\n")
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if got := other.do("LOCKINFO", "lock:w"); strings.HasSuffix(got, "waiters :1]") {
			break
		} else if time.Since(start) > 30*time.Second {
			t.Fatalf("the LOCK never waited: LOCKINFO %s", got)
		}
	}
	pub := newClient(t, p.data.Addr(), 2)
	for i := 1; i <= 3; i++ {
		if n := pub.Publish(ctx, "cw", fmt.Sprint("m", i)).Val(); n != 1 {
			t.Fatalf("PUBLISH m%d reached %d subscribers", i, n)
		}
	}
	for i := 1; i <= 3; i++ {
		if got, want := r.reply(), fmt.Sprintf(">[message cw m%d]", i); got != want {
			t.Fatalf("while LOCK waits: %s, want %s", got, want)
		}
	}
	if got := holder.do("DEL", "lock:w"); got != ":1" {
		t.Fatalf("holder's DEL: %s", got)
	}
	if got := r.reply(); !strings.HasPrefix(got, "[") || !strings.HasSuffix(got, "]") {
		t.Fatalf("LOCK after the release: %s", got)
	}
	if got := r.do("INCR", "after"); got != ":1" {
		t.Fatalf("INCR after the LOCK: %s", got)
	}
}

// TestPassthroughHelloWhileSubscribed: HELLO on a subscribed connection
// behaves as on Redis 7.0 — refused in RESP2's subscribed mode; allowed in
// RESP3, where HELLO 2 puts the connection in RESP2's subscribed mode:
// messages come as arrays, other commands are refused until UNSUBSCRIBE.
// The same steps run against a plain redis-server, then through lockproxy.
func TestPassthroughHelloWhileSubscribed(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	pub := newClient(t, p.data.Addr(), 2)
	refusal := func(cmd string) string {
		return "-ERR Can't execute '" + cmd + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
	}
	const hello = "[server redis version " // HELLO's reply, lockproxy's or Redis's
	type step struct {
		args    []string // nil: publish msg on hs, then read
		msg     string
		want    string
		isPrefx bool
	}
	run := func(t *testing.T, addr string) {
		for _, tc := range []struct {
			name  string
			steps []step
		}{
			{"resp2", []step{
				{args: []string{"SUBSCRIBE", "hs2"}, want: "[subscribe hs2 :1]"},
				{args: []string{"HELLO", "3"}, want: refusal("hello")},
				{args: []string{"HELLO", "2"}, want: refusal("hello")},
				{msg: "a", want: "[message hs2 a]"},
			}},
			{"resp3", []step{
				{args: []string{"HELLO", "3"}, want: hello, isPrefx: true},
				{args: []string{"SUBSCRIBE", "hs3"}, want: ">[subscribe hs3 :1]"},
				{msg: "a", want: ">[message hs3 a]"},
				{args: []string{"HELLO", "3"}, want: hello, isPrefx: true},
				{msg: "b", want: ">[message hs3 b]"},
				{args: []string{"HELLO", "2"}, want: hello, isPrefx: true},
				{msg: "c", want: "[message hs3 c]"},
				{args: []string{"GET", "x"}, want: refusal("get")},
				{args: []string{"SET", "lock:h", "v", "NX", "PX", "10000"}, want: refusal("set")},
				{args: []string{"HELLO", "3"}, want: refusal("hello")},
				{args: []string{"PING"}, want: "[pong ]"},
				{args: []string{"UNSUBSCRIBE"}, want: "[unsubscribe hs3 :0]"},
				{args: []string{"GET", "x"}, want: "(nil)"},
				{args: []string{"HELLO", "3"}, want: hello, isPrefx: true},
				{args: []string{"SUBSCRIBE", "hs3"}, want: ">[subscribe hs3 :1]"},
				{msg: "d", want: ">[message hs3 d]"},
				{args: []string{"INCR", "hs:n"}, want: ":1"},
			}},
		} {
			r := dialRaw(t, addr)
			for i, s := range tc.steps {
				var got string
				if s.args == nil {
					ch := "hs2"
					if tc.name == "resp3" {
						ch = "hs3"
					}
					if n := pub.Publish(ctx, ch, s.msg).Val(); n != 1 {
						t.Fatalf("%s step %d: PUBLISH reached %d subscribers", tc.name, i, n)
					}
					got = r.reply()
				} else {
					got = r.do(s.args...)
				}
				if got != s.want && !(s.isPrefx && strings.HasPrefix(got, s.want)) {
					t.Fatalf("%s step %d %v: %s, want %s", tc.name, i, s.args, got, s.want)
				}
			}
			r.c.Close()
			pub.Del(ctx, "hs:n")
		}
	}
	t.Run("redis", func(t *testing.T) { run(t, p.data.Addr()) })
	t.Run("lockproxy", func(t *testing.T) { run(t, p.in.Addr()) })
}

// TestPassthroughSubscribeInMulti: SUBSCRIBE inside MULTI is queued, as on
// Redis 7.0, and EXEC leaves the connection subscribed (RESP2: other
// commands refused; messages relayed); MONITOR inside MULTI fails at EXEC;
// UNSUBSCRIBE inside MULTI when not subscribed just reports it. The same
// steps run against a plain redis-server, then through lockproxy.
func TestPassthroughSubscribeInMulti(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	pub := newClient(t, p.data.Addr(), 2)
	refusal := func(cmd string) string {
		return "-ERR Can't execute '" + cmd + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
	}
	type step struct {
		args []string // nil: publish msg on sm, then read
		msg  string
		want string
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"resp2", []step{
			{args: []string{"MULTI"}, want: "+OK"},
			{args: []string{"SUBSCRIBE", "sm"}, want: "+QUEUED"},
			{args: []string{"SET", "sm:k", "v"}, want: "+QUEUED"},
			{args: []string{"EXEC"}, want: "[[subscribe sm :1] +OK]"},
			{msg: "a", want: "[message sm a]"},
			{args: []string{"GET", "sm:k"}, want: refusal("get")},
			{args: []string{"SET", "lock:sm", "v", "NX", "PX", "1000"}, want: refusal("set")},
			{args: []string{"UNSUBSCRIBE"}, want: "[unsubscribe sm :0]"},
			{args: []string{"GET", "sm:k"}, want: "v"},
		}},
		{"resp3", []step{
			{args: []string{"HELLO", "3"}},
			{args: []string{"MULTI"}, want: "+OK"},
			{args: []string{"SUBSCRIBE", "sm"}, want: "+QUEUED"},
			{args: []string{"PSUBSCRIBE", "sm*"}, want: "+QUEUED"},
			{args: []string{"EXEC"}, want: "[>[subscribe sm :1] >[psubscribe sm* :2]]"},
			{msg: "b", want: ">[message sm b]"},
			{want: ">[pmessage sm* sm b]"},
			{args: []string{"INCR", "sm:n"}, want: ":1"},
		}},
		{"monitor", []step{
			{args: []string{"MULTI"}, want: "+OK"},
			{args: []string{"MONITOR"}, want: "+QUEUED"},
			{args: []string{"EXEC"}, want: "[-ERR MONITOR isn't allowed for DENY BLOCKING client]"},
			{args: []string{"GET", "sm:k"}, want: "v"},
		}},
		{"unsubscribe", []step{
			{args: []string{"MULTI"}, want: "+OK"},
			{args: []string{"UNSUBSCRIBE"}, want: "+QUEUED"},
			{args: []string{"EXEC"}, want: "[[unsubscribe (nil) :0]]"},
			{args: []string{"GET", "sm:k"}, want: "v"},
		}},
	}
	run := func(t *testing.T, addr string) {
		pub.Del(ctx, "sm:k", "sm:n")
		for _, tc := range cases {
			r := dialRaw(t, addr)
			for i, s := range tc.steps {
				var got string
				switch {
				case s.args == nil && s.msg != "":
					// An earlier case's connection may not be gone yet: at least this one.
					if n := pub.Publish(ctx, "sm", s.msg).Val(); n < 1 {
						t.Fatalf("%s step %d: PUBLISH reached %d subscribers", tc.name, i, n)
					}
					got = r.reply()
				case s.args == nil:
					got = r.reply()
				default:
					got = r.do(s.args...)
				}
				if s.want != "" && got != s.want {
					t.Fatalf("%s step %d %v: %s, want %s", tc.name, i, s.args, got, s.want)
				}
			}
			r.c.Close()
		}
	}
	t.Run("redis", func(t *testing.T) { run(t, p.data.Addr()) })
	t.Run("lockproxy", func(t *testing.T) { run(t, p.in.Addr()) })
}

// TestPassthroughClientSubcommands: the CLIENT subcommands that concern the
// data connection work through lockproxy as on a plain redis-server:
// tracking with RESP3 invalidation pushes (lock commands still served on
// the same connection), tracking in RESP2 redirected to another client's
// subscription by the id CLIENT ID gave, GETREDIR, TRACKINGINFO, UNBLOCK
// of a client blocked in BLPOP (TIMEOUT and ERROR), PAUSE/UNPAUSE. The same
// steps run against the plain redis-server, then through lockproxy.
func TestPassthroughClientSubcommands(t *testing.T) {
	p := startPassthrough(t, "lock:*")
	ctx := context.Background()
	direct := newClient(t, p.data.Addr(), 2)
	run := func(t *testing.T, addr string) {
		direct.Del(ctx, "tk", "tk2", "lock:t")
		// RESP3: invalidation pushes on the tracking connection.
		a := dialRaw(t, addr)
		a.do("HELLO", "3")
		if got := a.do("CLIENT", "TRACKING", "ON"); got != "+OK" {
			t.Fatalf("CLIENT TRACKING ON: %s", got)
		}
		if got := a.do("GET", "tk"); got != "(nil)" {
			t.Fatalf("GET tk: %s", got)
		}
		direct.Set(ctx, "tk", "1", 0)
		if got := a.reply(); got != ">[invalidate [tk]]" {
			t.Fatalf("invalidation: %s", got)
		}
		if got := a.do("SET", "lock:t", "v", "NX", "PX", "10000"); got != "+OK" {
			t.Fatalf("SET lock:t NX while tracking: %s", got)
		}
		if got := a.do("CLIENT", "TRACKINGINFO"); got != "[flags [on] redirect :0 prefixes []]" {
			t.Fatalf("TRACKINGINFO: %s", got)
		}
		if got := a.do("GET", "tk"); got != "1" {
			t.Fatalf("GET tk after: %s", got)
		}

		// RESP2: redirected to a subscriber, named by its CLIENT ID.
		s, b := dialRaw(t, addr), dialRaw(t, addr)
		sid := strings.TrimPrefix(s.do("CLIENT", "ID"), ":")
		if got := s.do("SUBSCRIBE", "__redis__:invalidate"); got != "[subscribe __redis__:invalidate :1]" {
			t.Fatalf("SUBSCRIBE __redis__:invalidate: %s", got)
		}
		if got := b.do("CLIENT", "TRACKING", "ON", "REDIRECT", sid); got != "+OK" {
			t.Fatalf("TRACKING ON REDIRECT %s: %s", sid, got)
		}
		if got := b.do("CLIENT", "GETREDIR"); got != ":"+sid {
			t.Fatalf("GETREDIR: %s, want :%s", got, sid)
		}
		if got := b.do("CLIENT", "TRACKING", "ON", "REDIRECT", "999999"); got != "-ERR The client ID you want redirect to does not exist" {
			t.Fatalf("REDIRECT to nobody: %s", got)
		}
		b.do("GET", "tk2")
		direct.Set(ctx, "tk2", "1", 0)
		if got := s.reply(); got != "[message __redis__:invalidate [tk2]]" {
			t.Fatalf("redirected invalidation: %s", got)
		}

		// UNBLOCK a client blocked in BLPOP, by its CLIENT ID.
		pop, u := dialRaw(t, addr), dialRaw(t, addr)
		pid := strings.TrimPrefix(pop.do("CLIENT", "ID"), ":")
		for _, mode := range []struct{ arg, want string }{{"TIMEOUT", "(nil)"}, {"ERROR", "-UNBLOCKED client unblocked via CLIENT UNBLOCK"}} {
			pop.send("*3\r\n$5\r\nBLPOP\r\n$5\r\nnoq:1\r\n$1\r\n0\r\n")
			for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
				if got := u.do("CLIENT", "UNBLOCK", pid, mode.arg); got == ":1" {
					break
				} else if got != ":0" || time.Since(start) > 30*time.Second {
					t.Fatalf("CLIENT UNBLOCK %s %s: %s", pid, mode.arg, got)
				}
			}
			if got := pop.reply(); got != mode.want {
				t.Fatalf("BLPOP unblocked with %s: %s, want %s", mode.arg, got, mode.want)
			}
		}
		if got := u.do("CLIENT", "UNBLOCK", pid); got != ":0" {
			t.Fatalf("CLIENT UNBLOCK of a client not blocked: %s", got)
		}
		for _, cmd := range [][]string{{"CLIENT", "PAUSE", "60000", "WRITE"}, {"CLIENT", "UNPAUSE"}} {
			if got := u.do(cmd...); got != "+OK" {
				t.Fatalf("%v: %s", cmd, got)
			}
		}
	}
	t.Run("redis", func(t *testing.T) { run(t, p.data.Addr()) })
	t.Run("lockproxy", func(t *testing.T) {
		run(t, p.in.Addr())
		if n := p.onLockNodes("lock:t"); n < 2 {
			t.Fatalf("lock:t on %d lock nodes", n)
		}
	})
}

// TestPassthroughRefusedHelloWhileSubscribed: a HELLO 2 whose AUTH fails on
// a subscribed RESP3 connection changes nothing, as on Redis 7.0: messages
// still come as pushes, before and after the connection's next command.
func TestPassthroughRefusedHelloWhileSubscribed(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	cfg := testConfig(redistest.StartN(t, 3, redistest.Options{}))
	cfg.Password = "sec"
	cfg.Passthrough.Address, cfg.Passthrough.LockKeys = data.Addr(), []string{"lock:*"}
	in := startInstance(t, cfg)
	pub := newClient(t, data.Addr(), 2)
	r := dialRaw(t, in.Addr())
	if got := r.do("HELLO", "3", "AUTH", "default", "sec"); !strings.HasPrefix(got, "[server") {
		t.Fatalf("HELLO 3 AUTH: %s", got)
	}
	if got := r.do("SUBSCRIBE", "ha"); got != ">[subscribe ha :1]" {
		t.Fatalf("SUBSCRIBE: %s", got)
	}
	if got := r.do("HELLO", "2", "AUTH", "default", "wrong"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("HELLO 2 with a wrong password: %s", got)
	}
	for i, next := range []string{"", "PING"} {
		if next != "" {
			if got := r.do(next); got != "pong" && got != "PONG" && got != "+PONG" {
				t.Fatalf("%s: %s", next, got)
			}
		}
		msg := fmt.Sprint("m", i)
		if n := pub.Publish(context.Background(), "ha", msg).Val(); n != 1 {
			t.Fatalf("PUBLISH reached %d subscribers", n)
		}
		if got, want := r.reply(), ">[message ha "+msg+"]"; got != want {
			t.Fatalf("message %d after the refused HELLO: %s, want %s", i, got, want)
		}
	}
}
