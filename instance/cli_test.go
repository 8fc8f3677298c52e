package instance_test

import (
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
)

// redisCLI runs redis-cli against addr with script on its standard input
// and returns its output lines.
func redisCLI(t *testing.T, addr, script string, args ...string) []string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli: %v\n%s", err, out)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}

// TestRedisCLITranscript drives every native command through redis-cli and
// checks the transcript line by line (patterns where values are random).
// validityOf30s and validityOf60s stand for the validity of a 30 s and a
// 60 s lease in TestRedisCLITranscript: bounded by the time the redis-cli
// run took, not by a fixed tolerance.
const (
	validityOf30s = "validity of a 30 s lease"
	validityOf60s = "validity of a 60 s lease"
)

var validities = map[string]int64{validityOf30s: 30000, validityOf60s: 60000}

func TestRedisCLITranscript(t *testing.T) {
	eachBackend(t, func(t *testing.T, cfg instance.Config) {
		in := startInstance(t, cfg)
		script := `PING
CLIENT SETNAME cli-test
LOCK orders:42 PX 30000 TOKEN t-1
LOCK orders:42 PX 30000
LOCK orders:42 PX 30000 TOKEN t-1
LOCKINFO orders:42
RENEW orders:42 t-1 PX 60000
RENEW orders:42 wrong
UNLOCK orders:42 wrong
UNLOCK orders:42 t-1
LOCKINFO orders:42
LOCK orders:42
UNLOCK orders:42 t-1
LOCK orders:42 PX soon
FROB orders:42
`
		want := []string{
			`^PONG$`,
			`^OK$`,
			`^t-1$`, `^\d+$`, validityOf30s, // token, fence, validity
			`^$`,                            // not acquired: null
			`^t-1$`, `^\d+$`, validityOf30s, // idempotent retry
			`^fence$`, `^\d+$`, `^validity$`, `^\d+$`, `^mode$`, `^lease$`, `^holder$`, `^cli-test$`, `^waiters$`, `^0$`,
			validityOf60s,
			`^$`,
			`^0$`,
			`^1$`,
			`^$`,
			`^[0-9a-f]{32}$`, `^\d+$`, `^\d+$`, // connection-bound: random token, fence
			`^0$`,
			`^ERR value is not an integer or out of range$`, `^$`, // redis-cli adds a blank line after an error
			`^ERR unknown command 'FROB', with args beginning with: 'orders:42' $`,
		}
		started := time.Now()
		got := redisCLI(t, in.Addr(), script)
		ran := time.Since(started)
		if len(got) != len(want) {
			t.Fatalf("transcript has %d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		for i, w := range want {
			if ttl, ok := validities[w]; ok {
				// At most the TTL; at least the TTL less the whole run's
				// time and the drift allowance (1% + 2 ms).
				v, err := strconv.ParseInt(got[i], 10, 64)
				low := ttl - ran.Milliseconds() - ttl/100 - 3
				if err != nil || v > ttl || v < low {
					t.Errorf("line %d: validity %q not in [%d, %d] (the run took %v)", i+1, got[i], low, ttl, ran)
				}
				continue
			}
			if !regexp.MustCompile(w).MatchString(got[i]) {
				t.Errorf("line %d: %q does not match %s", i+1, got[i], w)
			}
		}
	})
}
