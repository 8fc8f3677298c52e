package upstream

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
	"time"
)

// TestScriptSHAs checks that each embedded script's SHA1 is the name a
// real SCRIPT LOAD gives it, so EVALSHA finds scripts loaded by anyone.
func TestScriptSHAs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		c := rawClient(t, addr)
		for _, s := range scripts {
			sum := sha1.Sum([]byte(s.src))
			got, err := c.ScriptLoad(testCtx(t), s.src).Result()
			if err != nil {
				t.Fatalf("SCRIPT LOAD %s: %v", s.name, err)
			}
			if want := hex.EncodeToString(sum[:]); got != want || s.sha != want {
				t.Errorf("%s: SCRIPT LOAD = %s, embedded sha1 = %s, script.sha = %s", s.name, got, want, s.sha)
			}
		}
	})
}

func TestMillis(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{{"0s", 0}, {"-1s", 0}, {"1ns", 1}, {"1ms", 1}, {"1.001ms", 2}, {"2s", 2000}} {
		d, err := time.ParseDuration(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := millis(d); got != tc.want {
			t.Errorf("millis(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
