package instance_test

import (
	"crypto/sha1"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// compatCompareAndDelete is the release script most hand-written Redis locks use.
const compatCompareAndDelete = `if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`

// compatCLIError is how redis-cli prints an error reply: its all-capitals code
// first.
// pttlOf30s stands for the PTTL of a 30 s lease set in the same redis-cli
// run: bounded by the time the run took, not a fixed tolerance.
const pttlOf30s = "pttl of a 30 s lease"

var compatCLIError = regexp.MustCompile(`^[A-Z][A-Z_]+ `)

// TestCompatCLITranscript drives the legacy commands through redis-cli and
// checks the transcript line by line (patterns where values are timings):
// SET NX with PX / EX / no TTL, GET, EXISTS, TTL, PTTL, EXPIRE, PEXPIRE, DEL,
// UNLINK, SETNX, EVAL and SCRIPT LOAD + EVALSHA of compare-and-delete,
// SCRIPT EXISTS, an unknown SHA1, and bad input.
func TestCompatCLITranscript(t *testing.T) {
	sum := sha1.Sum([]byte(compatCompareAndDelete))
	sha := hex.EncodeToString(sum[:])
	compatTargets(t, func(t *testing.T, addr string) {
		p := uniqueKey(t)
		// The steps: a command and the patterns of the lines it prints.
		// redis-cli prints a null as an empty line, and an empty line after
		// an error.
		steps := []struct {
			cmd  string
			want []string
		}{
			{`SET {p}:a v NX PX 30000`, []string{`^OK$`}},
			{`SET {p}:a v2 NX`, []string{`^$`}},
			{`SET {p}:a v2 NX PX 30000`, []string{`^$`}},
			{`GET {p}:a`, []string{`^v$`}},
			{`PTTL {p}:a`, []string{pttlOf30s}},
			{`EXISTS {p}:a`, []string{`^1$`}},
			{`EXPIRE {p}:a 60`, []string{`^1$`}},
			{`TTL {p}:a`, []string{`^(59|60)$`}},
			{`PEXPIRE {p}:a 45000`, []string{`^1$`}},
			{`PTTL {p}:a`, []string{`^(44\d\d\d|45000)$`}},
			{`EVAL "` + compatCompareAndDelete + `" 1 {p}:a wrong`, []string{`^0$`}},
			{`GET {p}:a`, []string{`^v$`}},
			{`EVAL "` + compatCompareAndDelete + `" 1 {p}:a v`, []string{`^1$`}},
			{`EXISTS {p}:a`, []string{`^0$`}},
			{`GET {p}:a`, []string{`^$`}},
			{`PTTL {p}:a`, []string{`^-2$`}},
			{`TTL {p}:a`, []string{`^-2$`}},
			{`EXPIRE {p}:a 60`, []string{`^0$`}},
			{`DEL {p}:a`, []string{`^0$`}},
			{`SET {p}:a v3 NX PX 30000`, []string{`^OK$`}},
			{`DEL {p}:a`, []string{`^1$`}},
			{`GET {p}:a`, []string{`^$`}},
			{`SET {p}:b w EX 30 NX`, []string{`^OK$`}},
			{`TTL {p}:b`, []string{`^(29|30)$`}},
			{`UNLINK {p}:b`, []string{`^1$`}},
			{`EXISTS {p}:b`, []string{`^0$`}},
			{`SETNX {p}:c t`, []string{`^1$`}},
			{`SETNX {p}:c u`, []string{`^0$`}},
			{`GET {p}:c`, []string{`^t$`}},
			{`TTL {p}:c`, []string{`^-1$`}},
			{`EXPIRE {p}:c 30`, []string{`^1$`}},
			{`TTL {p}:c`, []string{`^(29|30)$`}},
			{`DEL {p}:c`, []string{`^1$`}},
			{`EXISTS {p}:c`, []string{`^0$`}},
			{`SCRIPT LOAD "` + compatCompareAndDelete + `"`, []string{`^` + sha + `$`}},
			{`SCRIPT EXISTS ` + sha + ` ffffffffffffffffffffffffffffffffffffffff`, []string{`^1$`, `^0$`}},
			{`SET {p}:d x NX PX 30000`, []string{`^OK$`}},
			{`EVALSHA ` + sha + ` 1 {p}:d nope`, []string{`^0$`}},
			{`GET {p}:d`, []string{`^x$`}},
			{`EVALSHA ` + sha + ` 1 {p}:d x`, []string{`^1$`}},
			{`EXISTS {p}:d`, []string{`^0$`}},
			{`EVALSHA ffffffffffffffffffffffffffffffffffffffff 1 {p}:d x`, []string{`^NOSCRIPT No matching script\. Please use EVAL\.$`, `^$`}},
			// Bad input.
			{`SET {p}:e v NX XX`, []string{`^ERR syntax error$`, `^$`}},
			{`SET {p}:e v NX EX 10 PX 100`, []string{`^ERR syntax error$`, `^$`}},
			{`SET {p}:e v NX PX 0`, []string{`^ERR invalid expire time in 'set' command$`, `^$`}},
			{`SET {p}:e v NX PX soon`, []string{`^ERR value is not an integer or out of range$`, `^$`}},
			{`SETNX {p}:e`, []string{`^ERR wrong number of arguments for 'setnx' command$`, `^$`}},
			{`EXISTS {p}:e`, []string{`^0$`}},
		}
		var script strings.Builder
		for _, s := range steps {
			script.WriteString(strings.ReplaceAll(s.cmd, "{p}", p) + "\n")
		}
		started := time.Now()
		got := redisCLI(t, addr, script.String())
		ran := time.Since(started)
		// Match the output command by command; an unexpected error reply
		// (and the empty line redis-cli prints after it) is consumed as that
		// command's output, so one wrong reply does not shift the rest.
		i := 0
		for _, s := range steps {
			cmd := strings.ReplaceAll(s.cmd, "{p}", p)
			if i >= len(got) {
				t.Fatalf("transcript ends before the reply to %s:\n%s", cmd, strings.Join(got, "\n"))
			}
			if compatCLIError.MatchString(got[i]) && !compatCLIError.MatchString(strings.TrimPrefix(s.want[0], "^")) {
				t.Errorf("%s: %q, want %s", cmd, got[i], strings.Join(s.want, " "))
				i++
				if i < len(got) && got[i] == "" {
					i++
				}
				continue
			}
			for _, w := range s.want {
				if i >= len(got) {
					t.Fatalf("transcript ends in the reply to %s:\n%s", cmd, strings.Join(got, "\n"))
				}
				if w == pttlOf30s {
					// At most the 30 s lease; at least the lease less the
					// whole run and the drift allowance (1% + 2 ms).
					if ms, err := strconv.ParseInt(got[i], 10, 64); err != nil || ms > 30000 || ms < 30000-ran.Milliseconds()-302 {
						t.Errorf("%s: line %d %q, want a PTTL in [30000-%v-302ms, 30000]", cmd, i+1, got[i], ran)
					}
				} else if !regexp.MustCompile(w).MatchString(got[i]) {
					t.Errorf("%s: line %d %q does not match %s", cmd, i+1, got[i], w)
				}
				i++
			}
		}
		if i != len(got) {
			t.Errorf("transcript has %d lines, want %d:\n%s", len(got), i, strings.Join(got, "\n"))
		}
	})
}
