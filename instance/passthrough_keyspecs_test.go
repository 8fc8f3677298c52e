package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// keySpecCases are commands whose keys are not (only) their first argument
// and that write {lock}, with what sets up their sources.
var keySpecCases = []struct {
	name  string
	setup [][]string
	cmd   []string
}{
	{"SORT STORE", [][]string{{"RPUSH", "l", "3", "1"}}, []string{"SORT", "l", "STORE", "{lock}"}},
	{"BITOP", [][]string{{"SET", "b", "x"}}, []string{"BITOP", "OR", "{lock}", "b"}},
	{"GEORADIUS STORE", [][]string{{"GEOADD", "g", "13.361389", "38.115556", "p"}}, []string{"GEORADIUS", "g", "15", "37", "200", "km", "STORE", "{lock}"}},
	{"ZUNIONSTORE numkeys", [][]string{{"ZADD", "z", "1", "m"}}, []string{"ZUNIONSTORE", "{lock}", "1", "z"}},
	{"COPY", [][]string{{"SET", "s", "v"}}, []string{"COPY", "s", "{lock}"}},
	{"LMOVE", [][]string{{"RPUSH", "l2", "e"}}, []string{"LMOVE", "l2", "{lock}", "LEFT", "LEFT"}},
}

// TestPassthroughKeySpecsRefuseMixed: each command of keySpecCases writes
// its lock-named destination on a plain redis-server (checked first);
// through lockproxy, while that lock is held, it is refused as naming lock
// and data keys at once, the data Redis gets no such key and the lock keeps
// its token. XREAD STREAMS of a lock key and a data key is refused too.
// Issue 27 §5.
func TestPassthroughKeySpecsRefuseMixed(t *testing.T) {
	ctx := context.Background()
	plain := newClient(t, redistest.Start(t, redistest.Options{}).Addr(), 2)
	p := startPassthrough(t, "lock:*")
	c := newClient(t, p.in.Addr(), 2)
	data := newClient(t, p.data.Addr(), 2)
	for _, kc := range keySpecCases {
		lock := "lock:" + uniqueKey(t)
		cmd := make([]any, len(kc.cmd))
		for i, a := range kc.cmd {
			cmd[i] = strings.ReplaceAll(a, "{lock}", lock)
		}
		for _, s := range kc.setup {
			args := make([]any, len(s))
			for i, a := range s {
				args[i] = a
			}
			plain.Do(ctx, args...)
			if err := c.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("%s: setup %v through lockproxy: %v", kc.name, s, err)
			}
		}
		if err := plain.Do(ctx, cmd...).Err(); err != nil || plain.Exists(ctx, lock).Val() != 1 {
			t.Fatalf("%s on a plain Redis: %v; %s not written", kc.name, err, lock)
		}
		if ok, err := c.SetNX(ctx, lock, "tok", 10*time.Second).Result(); !ok || err != nil {
			t.Fatalf("%s: SET NX: %v, %v", kc.name, ok, err)
		}
		err := c.Do(ctx, cmd...).Err()
		if err == nil || !strings.Contains(err.Error(), "names both lock keys and data keys") {
			t.Errorf("%s through lockproxy while %s is held: %v, want the refusal of mixed keys", kc.name, lock, err)
		}
		if data.Exists(ctx, lock).Val() != 0 {
			t.Errorf("%s wrote %s on the data Redis", kc.name, lock)
		}
		if v, err := c.Get(ctx, lock).Result(); v != "tok" || err != nil {
			t.Errorf("%s: GET %s = %q, %v, want the token", kc.name, lock, v, err)
		}
	}
	err := c.Do(ctx, "XREAD", "STREAMS", "lock:s", "s", "0", "0").Err()
	if err == nil || !strings.Contains(err.Error(), "names both lock keys and data keys") {
		t.Errorf("XREAD STREAMS lock:s s: %v, want the refusal of mixed keys", err)
	}
}
