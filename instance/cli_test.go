package instance_test

import (
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"

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
			`^t-1$`, `^\d+$`, `^(29\d\d\d|30000)$`, // token, fence, validity
			`^$`,                                   // not acquired: null
			`^t-1$`, `^\d+$`, `^(29\d\d\d|30000)$`, // idempotent retry
			`^fence$`, `^\d+$`, `^validity$`, `^\d+$`, `^mode$`, `^lease$`, `^holder$`, `^cli-test$`, `^waiters$`, `^0$`,
			`^(59\d\d\d|60000)$`,
			`^$`,
			`^0$`,
			`^1$`,
			`^$`,
			`^[0-9a-f]{32}$`, `^\d+$`, `^\d+$`, // connection-bound: random token, fence
			`^0$`,
			`^ERR value is not an integer or out of range$`, `^$`, // redis-cli adds a blank line after an error
			`^ERR unknown command 'FROB', with args beginning with: 'orders:42' $`,
		}
		got := redisCLI(t, in.Addr(), script)
		if len(got) != len(want) {
			t.Fatalf("transcript has %d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		for i, w := range want {
			if !regexp.MustCompile(w).MatchString(got[i]) {
				t.Errorf("line %d: %q does not match %s", i+1, got[i], w)
			}
		}
	})
}
