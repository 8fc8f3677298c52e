package luascript

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The differential test runs every catalog script with EVAL on one real
// Redis and with Script.Run over redisLocks on another, from the same
// starting state, and compares replies and the resulting keys.

const (
	tok      = "tok-1"
	otherTok = "tok-2"
	heldTTL  = 10000 // ms, the TTL of held keys at the start
)

// keyState is a key's value and TTL at the start of a case.
type keyState struct {
	name  string // for the case's name
	value string // "" for a free key
	ttl   bool
}

var (
	free      = keyState{name: "free"}
	mine      = keyState{name: "mine", value: tok, ttl: true}
	mineNoTTL = keyState{name: "mineNoTTL", value: tok}
	other     = keyState{name: "other", value: otherTok, ttl: true}
	prefixed  = keyState{name: "prefixed", value: tok + "xyz", ttl: true} // bsm/redislock: same token, other metadata
)

// keyCases are the starting states of KEYS; dup repeats the first key.
var keyCases = []struct {
	states []keyState
	dup    bool
}{
	{states: nil},
	{states: []keyState{free}}, {states: []keyState{mine}}, {states: []keyState{mineNoTTL}},
	{states: []keyState{other}}, {states: []keyState{prefixed}},
	{states: []keyState{free, free}}, {states: []keyState{mine, mine}}, {states: []keyState{mine, other}},
	{states: []keyState{mine, free}}, {states: []keyState{free, mine}}, {states: []keyState{prefixed, mine}},
	{states: []keyState{other, free}}, {states: []keyState{mineNoTTL, mine}},
	{states: []keyState{mine}, dup: true}, {states: []keyState{free}, dup: true},
}

// argCases are ARGV lists covering every script's argument positions: the
// token, TTLs good and bad, redis-py's add/replace flag, redlock-rb's "yes",
// bsm/redislock's token length, a Spring channel.
var argCases = [][]string{
	{}, {tok}, {otherTok},
	{tok, "5000"}, {tok, "0"}, {tok, "-5"}, {tok, "abc"}, {tok, "1.5"}, {tok, "007"},
	{tok, "9223372036854775807"}, {tok, "9000000000000000"},
	{tok, "5000", "0"}, {tok, "5000", "1"}, {tok, "5000", "yes"}, {tok, "5000", "no"}, {otherTok, "5000", "yes"},
	{tok, "5", "5000"}, {tok, "0", "5000"}, {tok, "-2", "5000"}, {tok, "6", "5000"}, {tok, "2.5", "5000"},
	{tok, "x", "5000"}, {tok, "5", "abc"}, {tok, "5", "0"}, {tok, "5"},
	{tok, " 0x10 ", "0"}, {tok, "1e3", "0"}, {tok, "-20000", "0"}, {tok, "abc", "0"}, {tok, "1.5", "0"},
	{tok, "chan"},
}

func TestDifferentialAgainstRedis(t *testing.T) {
	ref := redistest.Start(t, redistest.Options{})
	back := redistest.Start(t, redistest.Options{})
	refClient := newClient(t, ref.Addr())
	locks := redisLocks{c: newClient(t, back.Addr())}
	for i, s := range Catalog() {
		src, err := sources.ReadFile("scripts/" + s.file)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			d := differ{t: t, s: s, src: string(src), raw: dialRESP(t, ref.Addr()), ref: refClient, locks: locks}
			for k, kc := range keyCases {
				for a, args := range argCases {
					keys := caseKeys(fmt.Sprintf("d%d:%d:%d", i, k, a), len(kc.states), kc.dup)
					d.check(keys, kc.states, args)
				}
			}
		})
	}
}

func newClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func caseKeys(prefix string, n int, dup bool) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:k%d", prefix, i)
	}
	if dup {
		keys = append(keys, keys[0])
	}
	return keys
}

type differ struct {
	t     *testing.T
	s     *Script
	src   string
	raw   *respConn     // EVAL on the reference Redis
	ref   *redis.Client // setup and state on the reference Redis
	locks redisLocks    // Script.Run's backend
}

// check runs one case on both sides and reports any difference.
func (d differ) check(keys []string, states []keyState, args []string) {
	t := d.t
	ctx := context.Background()
	name := caseName(states, len(keys) > len(states), args)
	d.setup(ctx, d.ref, keys, states)
	d.setup(ctx, d.locks.c, keys, states)
	evalArgs := append([]string{"EVAL", d.src, fmt.Sprint(len(keys))}, keys...)
	want, wantErr := d.raw.do(append(evalArgs, args...)...)
	got, gotErr := d.s.Run(ctx, d.locks, toBytes(keys), toBytes(args))
	reason := knownDeviation(d.s, len(keys), args, gotErr)
	if reason == devNoToken && wantErr != nil && gotErr != nil {
		t.Logf("%s: deviation (%s): redis %v, ours %v", name, reason, wantErr, gotErr)
		return
	}
	if msg := compareResult(want, wantErr, got, gotErr); msg != "" {
		t.Errorf("%s: %s", name, msg)
		return
	}
	if reason != "" {
		t.Logf("%s: deviation (%s): key states not compared", name, reason)
		return
	}
	for i, k := range keys[:len(states)] {
		w, g := d.state(ctx, d.ref, k), d.state(ctx, d.locks.c, k)
		if !w.close(g) {
			t.Errorf("%s: key %d: redis left %+v, ours %+v", name, i+1, w, g)
		}
	}
}

func caseName(states []keyState, dup bool, args []string) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = s.name
	}
	if dup {
		names = append(names, "dup")
	}
	return fmt.Sprintf("keys=[%s] argv=%q", strings.Join(names, ","), args)
}

func (d differ) setup(ctx context.Context, c *redis.Client, keys []string, states []keyState) {
	for i, st := range states {
		var err error
		switch {
		case st.value == "":
			err = c.Del(ctx, keys[i]).Err()
		case st.ttl:
			err = c.Set(ctx, keys[i], st.value, heldTTL*time.Millisecond).Err()
		default:
			err = c.Set(ctx, keys[i], st.value, 0).Err()
		}
		if err != nil {
			d.t.Fatal(err)
		}
	}
}

// endState is a key's value ("" when free) and PTTL after a case.
type endState struct {
	Value string
	PTTL  int64
}

func (d differ) state(ctx context.Context, c *redis.Client, key string) endState {
	v, err := c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return endState{PTTL: -2}
	}
	if err != nil {
		d.t.Fatal(err)
	}
	pttl, err := c.Do(ctx, "PTTL", key).Int64()
	if err != nil {
		d.t.Fatal(err)
	}
	if pttl == -2 { // expired since the GET
		return endState{PTTL: -2}
	}
	return endState{Value: v, PTTL: pttl}
}

// close: same value, TTL present on both or neither, and within a few
// hundred ms unless beyond the longest Duration (Locks caps TTLs there). A
// key given a TTL under a second may have expired on one side only.
func (w endState) close(g endState) bool {
	if w.PTTL == -2 && g.PTTL >= 0 && g.PTTL < 1000 || g.PTTL == -2 && w.PTTL >= 0 && w.PTTL < 1000 {
		return true
	}
	if w.Value != g.Value || (w.PTTL < 0) != (g.PTTL < 0) || w.PTTL < 0 && w.PTTL != g.PTTL {
		return false
	}
	return w.PTTL > 1e12 && g.PTTL > 1e12 || near(w.PTTL, g.PTTL)
}

func near(a, b int64) bool { return a-b < 500 && b-a < 500 }

// compareResult compares replies, or errors: ours must be Redis's text
// without the " script: ..." suffix; for Lua runtime errors, whose text
// carries a line number, both must be runtime errors.
func compareResult(want Reply, wantErr error, got Reply, gotErr error) string {
	if wantErr != nil || gotErr != nil {
		if wantErr == nil || gotErr == nil {
			return fmt.Sprintf("redis replied %+v, error %v; ours %+v, error %v", want, wantErr, got, gotErr)
		}
		if !errors.As(gotErr, new(ArgError)) {
			return fmt.Sprintf("ours %v is not an ArgError", gotErr)
		}
		w, _, _ := strings.Cut(wantErr.Error(), " script: ")
		const runtime = "ERR user_script:"
		if w != gotErr.Error() && !(strings.HasPrefix(w, runtime) && strings.HasPrefix(gotErr.Error(), runtime)) {
			return fmt.Sprintf("redis error %q, ours %q", w, gotErr)
		}
		return ""
	}
	if !sameReply(want, got) {
		return fmt.Sprintf("redis replied %+v, ours %+v", want, got)
	}
	return ""
}

// sameReply compares type and value; integers that are PTTLs (>= 1000) may
// differ by a few hundred ms.
func sameReply(w, g Reply) bool {
	if w.Kind != g.Kind || w.Str != g.Str || len(w.Array) != len(g.Array) {
		return false
	}
	if w.Int != g.Int && !(w.Int >= 1000 && near(w.Int, g.Int)) {
		return false
	}
	for i := range w.Array {
		if !sameReply(w.Array[i], g.Array[i]) {
			return false
		}
	}
	return true
}

// Documented deviations of bsm/redislock v0.10's obtain (see redislockObtainMulti).
const (
	devNoToken = "no ARGV[1], even number of keys: Redis MSETNXes the keys onto each other"
	devBadTTL  = "bad ARGV[3]: Redis sets the keys, then fails on PEXPIRE"
)

// knownDeviation names the documented difference this case hits, or "".
func knownDeviation(s *Script, nkeys int, args []string, gotErr error) string {
	if s.file != "redislock/obtain-v0.10.0.lua" || nkeys == 0 {
		return ""
	}
	if len(args) < 1 {
		if nkeys%2 == 0 {
			return devNoToken
		}
		return ""
	}
	ttl, ok := "", len(args) >= 3
	if ok {
		ttl = args[2]
	}
	if _, err := expireArg(ttl, ok, "pexpire"); err != nil && errors.Is(gotErr, err) {
		return devBadTTL
	}
	return ""
}

func toBytes(ss []string) [][]byte {
	bs := make([][]byte, len(ss))
	for i, s := range ss {
		bs[i] = []byte(s)
	}
	return bs
}
