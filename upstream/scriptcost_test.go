package upstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// BenchmarkScriptCost measures what a call of acquire.lua (its quiet path:
// key free, nobody in line) and of release.lua (the token's own hold) costs
// a real redis-server, against the same calls with parts of the scripts
// taken away: the preludes alone, an empty script with the same KEYS and
// ARGV, the commands alone, a lean acquire and release. The KEYS and ARGV
// are those a LOCK and UNLOCK of lockproxy send (MONITOR of a real
// instance). Each sub-benchmark runs b.N cycles on one node: depth calls
// (or calls of opsScript, group calls each) of acquire in one pipeline,
// then as many of release on the same keys, and reports the node's CPU
// (INFO cpu, user and system, read at the end of each pipeline) per call
// of each, and the commands' own time (INFO commandstats, the script's
// redis.call commands) per cycle:
//
//	go test ./upstream -run '^$' -bench ScriptCost -benchtime 30000x
//
// Figures and findings: docs/benchmarks.md, "Where a node's time goes per
// script call".
func BenchmarkScriptCost(b *testing.B) {
	addr := redistest.Start(b, redistest.Options{}).Addr()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	b.Cleanup(func() { c.Close() })
	for _, depth := range []int{32, 1} {
		for _, k := range costCases() {
			b.Run(fmt.Sprintf("%s/depth=%d", k.name, depth), func(b *testing.B) {
				runCost(b, c, k, depth)
			})
		}
	}
}

// costCase is a cycle: a call of acquire and one of release of key i.
type costCase struct {
	name     string
	acq, rel costSide
	group    int // calls per call of opsScript (the sides are its ops), 0: one EVALSHA each
}

// costSide is a script and its KEYS and ARGV for key i.
type costSide struct {
	src  string
	op   byte // the script's op in opsScript
	call func(i int) (keys []string, args []any)
}

// The KEYS and ARGV of lockproxy's acquire and release of key i (MONITOR
// of LOCK key PX 10000 and UNLOCK key token through a lockproxy instance).
func acquireCall(i int) ([]string, []any) {
	key, tok, att := costKey(i), costToken(i), costAttempt(i)
	return []string{key, "lockproxy:layout", "lockproxy:line:" + key, "lockproxy:line-deadline:" + key,
			"lockproxy:undone:" + att, "lockproxy:fence-floor", "lockproxy:fence-max",
			"lockproxy:meta:" + key, "lockproxy:released:" + key},
		[]any{tok, "10000", "32:" + tok, "5:lease0:5:1000032:" + att, "", "0", "0", "", "0", att, ""}
}

func releaseCall(i int) ([]string, []any) {
	key, tok := costKey(i), costToken(i)
	return []string{key, "lockproxy:line:" + key, "lockproxy:line-deadline:" + key, "lockproxy:undone:",
			"lockproxy:meta:" + key, "lockproxy:released:" + key},
		[]any{tok, "lockproxy:released", key, "1", "", "", "", "60000", "", "", "3600000", "32:" + tok}
}

func costKey(i int) string     { return "bench:k" + strconv.Itoa(i) }
func costToken(i int) string   { return fmt.Sprintf("%032x", 0xa000000+i) }
func costAttempt(i int) string { return fmt.Sprintf("%032x", 0xb000000+i) }

// leanCall is the lean acquire's and release's KEYS and ARGV: the key and
// the counter; the token and the ttl.
func leanCall(i int) ([]string, []any) {
	return []string{costKey(i), "lockproxy:layout"}, []any{costToken(i), "10000"}
}

func noArgs(int) ([]string, []any) { return nil, nil }

// The scripts the cases compare with lockproxy's. They reply as the quiet
// paths do; the commands-only ones run the quiet paths' commands on the
// same keys, with none of the scripts' Lua logic.
const (
	acquireReply = "return {1, 1795900320021696, 1795900320021696}\n"
	releaseReply = "return {1, 'b0000000000000000000000000000000'}\n"
	acquireCmds  = `
redis.call('EXISTS', KEYS[5], KEYS[3], KEYS[9])
local f = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
redis.call('SET', KEYS[8], ARGV[3] .. '16:' .. f .. ARGV[4] .. '1:11:0', 'PX', ARGV[2])
return {1, f, f}
`
	releaseCmds = `
redis.call('MGET', KEYS[1], KEYS[5])
redis.call('DEL', KEYS[1], KEYS[5])
return {1, 'b0000000000000000000000000000000'}
`
	// acquireInline is acquire.lua's quiet path, the same calls and writes,
	// without its preludes and functions (without its other paths: a probe).
	acquireInline = `
if ARGV[8] == '' and redis.call('EXISTS', KEYS[5], KEYS[3], KEYS[9]) == 0 then
  local fence = redis.pcall('INCR', KEYS[2])
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local f = string.format('%.0f', fence)
    redis.call('SET', KEYS[8], ARGV[3] .. #f .. ':' .. f .. ARGV[4] .. '1:11:0', 'PX', ARGV[2])
    return {1, fence, fence}
  end
end
return {0, 0, 0}
`
	// releaseInline is release.lua's path for the token's own hold whose
	// meta is its own, without the meta's fields read and without the
	// preludes (a probe: it checks the meta's first field only).
	releaseInline = `
local got = redis.call('MGET', KEYS[1], KEYS[5])
local s = got[2]
if got[1] == ARGV[1] and type(s) == 'string' and string.sub(s, 1, #ARGV[12]) == ARGV[12] then
  redis.call('DEL', KEYS[1], KEYS[5])
  return {1, 'b0000000000000000000000000000000'}
end
return 0
`
	// leanAcquire and leanRelease are issue 29's lean scripts: INCR of a
	// counter, then SET NX PX; compare and delete.
	leanAcquire = `
local f = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, f, f} end
return {0, f, 0}
`
	leanRelease = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`
)

func costCases() []costCase {
	acquire := costSide{src: acquireScript.src, op: acquireScript.op, call: acquireCall}
	release := costSide{src: releaseScript.src, op: releaseScript.op, call: releaseCall}
	return []costCase{
		{name: "as-is", acq: acquire, rel: release},
		{name: "ops-x4", acq: acquire, rel: release, group: 4},
		{name: "ops-x16", acq: acquire, rel: release, group: 16},
		{name: "preludes-only",
			acq: costSide{src: layoutLua + metaLua + acquireReply, call: acquireCall},
			rel: costSide{src: metaLua + releaseReply, call: releaseCall}},
		{name: "empty",
			acq: costSide{src: acquireReply, call: acquireCall},
			rel: costSide{src: releaseReply, call: releaseCall}},
		{name: "empty-noargs",
			acq: costSide{src: acquireReply, call: noArgs},
			rel: costSide{src: releaseReply, call: noArgs}},
		{name: "commands-only",
			acq: costSide{src: acquireCmds, call: acquireCall},
			rel: costSide{src: releaseCmds, call: releaseCall}},
		{name: "lean",
			acq: costSide{src: leanAcquire, call: leanCall},
			rel: costSide{src: leanRelease, call: leanCall}},
		{name: "inline",
			acq: costSide{src: acquireInline, call: acquireCall},
			rel: costSide{src: releaseInline, call: releaseCall}},
		// The lean scripts with lockproxy's KEYS and ARGV: their cost alone.
		{name: "lean-lockproxy-args",
			acq: costSide{src: leanAcquire, call: acquireCall},
			rel: costSide{src: leanRelease, call: releaseCall}},
	}
}

func runCost(b *testing.B, c *redis.Client, k costCase, depth int) {
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(c.FlushAll(ctx).Err())
	// A node in use: its counter is there (layout.lua).
	must(c.Set(ctx, "lockproxy:layout", "1795900320021695", 0).Err())
	shas := map[string]string{}
	for _, src := range []string{k.acq.src, k.rel.src, opsScript.src} {
		sha, err := c.ScriptLoad(ctx, src).Result()
		must(err)
		shas[src] = sha
	}
	// phase runs side's calls of keys from to to in one pipeline, and
	// returns the node's CPU time once they ran.
	phase := func(s costSide, from, to int) float64 {
		p := c.Pipeline()
		step := max(k.group, 1)
		for i := from; i < to; i += step {
			if k.group == 0 {
				keys, args := s.call(i)
				p.EvalSha(ctx, shas[s.src], keys, args...)
				continue
			}
			var head []byte
			var keys []string
			args := []any{nil}
			for j := i; j < min(i+step, to); j++ {
				kk, aa := s.call(j)
				head = append(head, s.op, byte(len(kk)), byte(len(aa)))
				keys, args = append(keys, kk...), append(args, aa...)
			}
			args[0] = string(head)
			p.EvalSha(ctx, shas[opsScript.src], keys, args...)
		}
		info := p.Info(ctx, "cpu")
		cmds, err := p.Exec(ctx)
		must(err)
		for _, cmd := range cmds[:len(cmds)-1] {
			v := cmd.(*redis.Cmd).Val()
			if k.group > 0 {
				for _, r := range v.([]any) {
					done(b, r)
				}
			} else {
				done(b, v)
			}
		}
		return cpuSeconds(b, info.Val())
	}
	n := b.N
	must(c.ConfigResetStat(ctx).Err())
	start, err := c.Info(ctx, "cpu").Result()
	must(err)
	last := cpuSeconds(b, start)
	var acq, rel float64
	batches := 0
	b.ResetTimer()
	for from := 0; from < n; from += depth * max(k.group, 1) {
		to := min(from+depth*max(k.group, 1), n)
		t := phase(k.acq, from, to)
		acq += t - last
		last = phase(k.rel, from, to)
		rel += last - t
		batches++
	}
	b.StopTimer()
	stats, err := c.Info(ctx, "commandstats").Result()
	must(err)
	// Each phase ends with an INFO cpu: its own time (commandstats) is
	// taken off.
	info := statField(commandStat(stats, "info"), "usec_per_call=") / 1e6 * float64(batches)
	b.ReportMetric((acq-info)*1e6/float64(n), "acquire-node-µs/call")
	b.ReportMetric((rel-info)*1e6/float64(n), "release-node-µs/call")
	var inner float64
	for _, line := range strings.Split(stats, "\n") {
		cmd, _, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		switch {
		case !strings.HasPrefix(line, "cmdstat_"), cmd == "evalsha", cmd == "info", strings.HasPrefix(cmd, "config"):
		default:
			inner += statField(line, "usec=")
		}
	}
	b.ReportMetric(inner/float64(n), "commands-µs/cycle")
}

// done fails b unless v is the reply of a call that took or released its
// key: 1, or an array that starts with 1.
func done(b *testing.B, v any) {
	if a, ok := v.([]any); ok && len(a) > 0 {
		v = a[0]
	}
	if v != int64(1) {
		b.Fatalf("reply %v, not a grant or release", v)
	}
}

// cpuSeconds is the node's CPU time so far in INFO cpu's reply, user and
// system.
func cpuSeconds(b *testing.B, info string) float64 {
	var s float64
	for _, line := range strings.Split(info, "\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				s += x
			}
		}
	}
	return s
}

// commandStat is cmd's line in INFO commandstats.
func commandStat(stats, cmd string) string {
	for _, line := range strings.Split(stats, "\n") {
		if strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			return line
		}
	}
	return ""
}

// statField is the number after name in a commandstats line.
func statField(line, name string) float64 {
	_, rest, ok := strings.Cut(line, name)
	if !ok {
		return 0
	}
	v, _, _ := strings.Cut(rest, ",")
	x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
	return x
}
