package instance_test

import (
	"bufio"
	"crypto/sha1"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// releaseScript is the compare-and-delete of the redis.io lock page.
const releaseScript = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

// legacyScenarios are command sequences whose replies must be exactly
// Redis's: K is a key unique to the scenario; a: and b: name the
// connection; a command starting with ~ replies a time, compared within
// bounds derived from the clock read around each call (see sameTime).
var legacyScenarios = map[string][]string{
	"lease": {
		"a: SET K tok NX PX 30000", "b: SET K other NX", "b: SET K tok NX", "b: SETNX K tok",
		"b: GET K", "b: EXISTS K K K:none", "~b: PTTL K", "~b: TTL K",
		"b: DEL K", "a: GET K", "a: EXISTS K", "a: PTTL K", "a: TTL K", "a: DEL K", "a: SET K again nx px 30000", "b: UNLINK K:none K",
	},
	"setnx then expire": {
		"a: SETNX K tok", "b: SETNX K tok", "a: TTL K", "a: PTTL K",
		"a: EXPIRE K 100 XX", "a: EXPIRE K 100 GT", "a: EXPIRE K 100 LT", "~a: TTL K",
		"a: EXPIRE K 50 GT", "a: EXPIRE K 200 GT", "a: EXPIRE K 10 NX", "a: pexpire K 5000 xx", "~a: PTTL K",
		"b: PEXPIRE K 0", "a: EXISTS K", "a: EXPIRE K 10", "a: SET K tok NX KEEPTTL", "a: TTL K", "a: EXPIRE K -1", "a: GET K",
	},
	"set options": {
		"a: SET K v NX XX", "a: SET K v EX 1 PX 1", "a: SET K v EX", "a: SET K v PX 0", "a: SET K v PX abc",
		"a: SET K v NX PX -5", "a: SET K v KEEPTTL EX 5", "a: SET K v GETT", "a: SET K v NX EX 9223372036854775",
		"a: EXISTS K", "a: SET K v NX EX 10 EX 20", "~a: TTL K", "a: SET K v NX GET", "a: set K w GET NX", "a: DEL K K",
		"a: SET K v NX GET", "a: DEL K", "a: SET K v NX PXAT 1000", "a: EXISTS K", "a: SET K v NX EXAT 1", "a: GET K",
	},
	"expire errors": {
		"a: SET K v NX PX 30000", "a: EXPIRE K 10 NX XX", "a: EXPIRE K 10 GT LT", "a: EXPIRE K 10 FOO", "a: EXPIRE K abc",
		"a: EXPIRE K:none 10", "a: EXPIRE K 9223372036854775807", "~a: PTTL K",
		// bad input changes no lock
		"b: SET K v2 NX XX", "b: SET K v2 NX PX 0", "b: SET K v2 NX EX 1 PX 1", "b: SET K v2 NX GET KEEPTTL EX 1",
		"b: EVAL " + releaseScript + " 2 K", "b: EVAL " + releaseScript + " -1 K v", "b: PEXPIRE K 10 GT LT",
		"~b: PTTL K", "b: GET K", "a: DEL K",
	},
	"databases": {
		"a: SELECT 1", "a: SET K tok1 NX PX 30000", "b: SET K tok0 NX PX 30000", "a: GET K", "b: GET K",
		"a: TYPE K", "b: TYPE K", "a: TYPE K:none", "a: EXISTS K K:none", "b: SELECT 16", "b: SELECT -1", "b: SELECT x",
		"b: SELECT", "b: SELECT 0 0", "b: GET K", "a: SET K tok1b NX", "a: DEL K", "b: GET K", "a: GET K", "a: TYPE K",
		"a: SET K tok1 NX PX 30000", "a: SELECT 15", "a: GET K", "a: SELECT 1", "a: GET K", "a: RESET", "a: GET K",
		"a: SELECT 1", "a: DEL K", "b: DEL K", "b: TYPE K", "b: TYPE", "b: TYPE K K",
	},
	"wait": {
		"a: SET K tok NX PX 30000", "a: WAIT 0 0", "a: WAIT 1 20", "a: WAIT 0 x", "a: WAIT x 0", "a: WAIT 0 -1",
		"a: WAIT 0", "a: WAIT 0 0 0", "a: GET K", "a: DEL K",
	},
	// Issue 26: integers read as Redis's string2ll, Redis 7.0's TTL
	// ranges, and the empty value ("" is an empty argument).
	"integers and ranges": {
		"a: SET K v NX PX +5000", "a: EXISTS K", "a: SET K v NX PX 010", "a: SET K v NX EX -0", "a: SET K v NX PX 9223372036854775807",
		"a: SET K v NX PX 30000", "a: EXPIRE K 010", "a: EXPIRE K +10", "a: PEXPIRE K 0x10", "a: EXPIRE K 9223372036854776", "~a: PTTL K",
		"a: EVAL " + releaseScript + " +1 K v", "a: EVAL " + releaseScript + " 01 K v", "a: DEL K",
		"a: SET K v NX EXAT 99999999999", "a: EXISTS K", "b: SET K w NX", "a: DEL K",
		"a: SET K v NX EX 9223372036854", "a: EXISTS K", "a: DEL K",
		`a: SET K "" NX`, "a: EXISTS K", `b: SET K "" NX`, `b: SETNX K ""`, "a: DEL K", "a: EXISTS K",
		`b: SETNX K ""`, "b: EXISTS K", "b: DEL K",
	},
	"scripts": {
		"a: SET K tok NX PX 30000",
		"a: EVAL " + releaseScript + " 1 K other", "a: GET K",
		"a: SCRIPT LOAD " + releaseScript, "a: SCRIPT EXISTS SHA ffffffffffffffffffffffffffffffffffffffff",
		"b: EVALSHA SHA 1 K tok", "b: EXISTS K", "b: EVALSHA SHA 1 K tok",
		"a: EVAL " + releaseScript + " -1", "a: EVAL " + releaseScript + " 2 K", "a: EVAL " + releaseScript + " x",
		"a: EVALSHA ffffffffffffffffffffffffffffffffffffffff 0", "a: SCRIPT FLUSH BOO", "a: SCRIPT FOO", "a: SCRIPT LOAD",
		"a: SCRIPT FLUSH ASYNC", "a: SCRIPT EXISTS SHA", "a: EVALSHA SHA 1 K tok",
	},
}

// TestLegacyRepliesMatchRedis runs every scenario on a plain redis-server
// and on lockproxy, in RESP2 and RESP3, and compares the replies byte for
// byte.
func TestLegacyRepliesMatchRedis(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		plain := redistest.Start(t, redistest.Options{})
		in := startInstance(t, cfg)
		sha := sha1Hex(releaseScript)
		for _, proto := range []int{2, 3} {
			for name, steps := range legacyScenarios {
				t.Run(fmt.Sprintf("%s/resp%d", name, proto), func(t *testing.T) {
					key := uniqueKey(t)
					want := runScenario(t, plain.Addr(), proto, steps, key, sha)
					got := runScenario(t, in.Addr(), proto, steps, key, sha)
					for i, step := range steps {
						if !sameReply(steps, i, got, want) {
							t.Errorf("%s: lockproxy %q, redis %q", step, got[i].raw, want[i].raw)
						}
					}
				})
			}
		}
	})
}

// stepReply is one step's raw reply and the clock read just before its
// command was sent and just after its reply was read.
type stepReply struct {
	raw         string
	sent, heard time.Time
}

// runScenario runs steps against addr and returns the raw replies.
func runScenario(t *testing.T, addr string, proto int, steps []string, key, sha string) []stepReply {
	conns := map[string]*rawConn{}
	out := make([]stepReply, len(steps))
	for i, step := range steps {
		name, cmd, _ := strings.Cut(strings.TrimPrefix(step, "~"), ": ")
		c := conns[name]
		if c == nil {
			c = dialProto(t, addr, proto)
			conns[name] = c
		}
		sent := time.Now()
		c.send(multibulk(scenarioArgs(cmd, key, sha)))
		c.c.SetReadDeadline(deadline())
		raw, err := readRaw(c.rd)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		out[i] = stepReply{raw: raw, sent: sent, heard: time.Now()}
	}
	return out
}

// scenarioArgs splits cmd into arguments, keeping a script whole and
// naming the scenario's key and the script's SHA1.
func scenarioArgs(cmd, key, sha string) []string {
	var args []string
	if rest, ok := strings.CutPrefix(cmd, "EVAL "+releaseScript); ok {
		args, cmd = []string{"EVAL", releaseScript}, rest
	} else if rest, ok := strings.CutPrefix(cmd, "SCRIPT LOAD "+releaseScript); ok {
		args, cmd = []string{"SCRIPT", "LOAD", releaseScript}, rest
	}
	for _, f := range strings.Fields(cmd) {
		f = strings.ReplaceAll(f, "SHA", sha)
		if f == `""` {
			f = ""
		}
		if f == "K" || strings.HasPrefix(f, "K:") {
			f = key + f[1:]
		}
		args = append(args, f)
	}
	return args
}

func multibulk(args []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// sameReply compares the replies to step i. A time (step starting with ~)
// is compared by sameTime; anything else byte for byte.
func sameReply(steps []string, i int, got, want []stepReply) bool {
	if !strings.HasPrefix(steps[i], "~") || got[i].raw == want[i].raw {
		return got[i].raw == want[i].raw
	}
	g, err1 := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(got[i].raw, ":")), 10, 64)
	w, err2 := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(want[i].raw, ":")), 10, 64)
	if err1 != nil || err2 != nil || w < 0 || g < 0 {
		return false
	}
	unit := int64(1) // PTTL
	if strings.Contains(steps[i], " TTL ") {
		unit = 1000
	}
	j := expirySetter(steps, i, want)
	return sameTime(g, w, unit, got[j], got[i], want[j], want[i])
}

// sameTime reports whether lockproxy's time g matches Redis's w (both in
// unit ms) for a lease set by step set and read by step read. No fixed
// tolerance: the lease's duration d is bounded by Redis's answer and the
// clock read around the two calls, and lockproxy's answer must lie between
//   - at most: d less the least time that passed between the two calls —
//     the validity is the time the lock is sure to be held, never more;
//   - at least: d less the most time that passed between them, the drift
//     allowance (1% of the TTL plus 2 ms, the defaults), 2 ms for the
//     nodes' whole-millisecond clocks, and the read's own duration once
//     more: lockproxy takes the nodes' remaining time, which already ran
//     down while the read was under way, and subtracts the whole read's
//     time again (quorum's Inspect), to stay on the safe side.
//
// TTL (unit 1000) is rounded to the nearest second by both.
func sameTime(g, w, unit int64, gotSet, gotRead, wantSet, wantRead stepReply) bool {
	round := unit / 2 // Redis's TTL is (ms+500)/1000
	dLo := w*unit - round + ms(wantRead.sent.Sub(wantSet.heard))
	dHi := w*unit + round + ms(wantRead.heard.Sub(wantSet.sent))
	hi := dHi - ms(gotRead.sent.Sub(gotSet.heard))
	lo := dLo - ms(gotRead.heard.Sub(gotSet.sent)) - (dHi/100 + 2) - 2 - ms(gotRead.heard.Sub(gotRead.sent))
	if unit == 1 {
		return lo <= g && g <= hi
	}
	return g >= (lo+round)/unit && g <= (hi+round)/unit
}

// expirySetter is the last step before i that set the key's expiry (a
// SET, EXPIRE or PEXPIRE that Redis accepted), or the first step.
func expirySetter(steps []string, i int, want []stepReply) int {
	for j := i - 1; j > 0; j-- {
		_, cmd, _ := strings.Cut(strings.TrimPrefix(steps[j], "~"), ": ")
		name := strings.ToUpper(strings.Fields(cmd)[0])
		ok := want[j].raw == "+OK\r\n" || want[j].raw == ":1\r\n"
		if ok && (name == "SET" || name == "EXPIRE" || name == "PEXPIRE") {
			return j
		}
	}
	return 0
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// readRaw reads one reply and returns its exact bytes.
func readRaw(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil || len(line) < 3 {
		return line, fmt.Errorf("reply line %q: %v", line, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return line, nil
		}
		buf := make([]byte, n+2)
		_, err := io.ReadFull(rd, buf)
		return line + string(buf), err
	case '*', '%', '~', '>':
		if line[0] == '%' {
			n *= 2
		}
		var b strings.Builder
		b.WriteString(line)
		for range max(n, 0) {
			s, err := readRaw(rd)
			b.WriteString(s)
			if err != nil {
				return b.String(), err
			}
		}
		return b.String(), nil
	}
	return line, nil
}

func sha1Hex(s string) string { return fmt.Sprintf("%x", sha1.Sum([]byte(s))) }

func deadline() time.Time { return time.Now().Add(10 * time.Second) }
