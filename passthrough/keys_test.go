package passthrough

import (
	"strings"
	"testing"
)

// TestKeysOf: keys are found as Redis's key specs place them, for the
// commands whose keys are not their first argument (issue 27 §5).
func TestKeysOf(t *testing.T) {
	for _, c := range []struct{ cmd, keys string }{
		{"GET k", "k"},
		{"MSET a 1 b 2", "a b"},
		{"DEL a b c", "a b c"},
		{"SORT l STORE lock:x", "l lock:x"},
		{"SORT l BY w:* GET store LIMIT 0 store STORE d", "l d"},
		{"SORT_RO l", "l"},
		{"BITOP AND lock:x a b", "lock:x a b"},
		{"GEORADIUS g 0 0 10 km STORE lock:x", "g lock:x"},
		{"GEORADIUSBYMEMBER g m 10 km STOREDIST lock:x", "g lock:x"},
		{"ZUNIONSTORE d 2 a lock:x WEIGHTS 1 2", "d a lock:x"},
		{"ZINTERCARD 2 a b LIMIT 1", "a b"},
		{"LMPOP 2 a b LEFT", "a b"},
		{"XREAD COUNT 1 STREAMS lock:x s 0 0", "lock:x s"},
		{"XREADGROUP GROUP g c STREAMS s 0", "s"},
		{"EVAL s 2 lock:a k x", "lock:a k"},
		{"EVAL s 0", ""},
		{"FCALL f 1 lock:a", "lock:a"},
		{"OBJECT ENCODING lock:x", "lock:x"},
		{"MEMORY USAGE lock:x", "lock:x"},
		{"XINFO STREAM s", "s"},
		{"MIGRATE h 1 \"\" 0 10 KEYS a b", "\"\" a b"},
		{"COPY a lock:x", "a lock:x"},
		{"PUBLISH c m", ""},
		{"SPUBLISH c m", ""},
		{"KEYS *", ""},
		{"ZUNIONSTORE d x a", ""}, // numkeys not a number: Redis refuses it
		{"NOSUCHCOMMAND a b", "a"},
	} {
		var args [][]byte
		for _, f := range strings.Fields(c.cmd) {
			args = append(args, []byte(f))
		}
		var got []string
		for _, k := range keysOf(strings.ToLower(string(args[0])), args) {
			got = append(got, string(k))
		}
		if strings.Join(got, " ") != c.keys {
			t.Errorf("keys of %q = %q, want %q", c.cmd, got, c.keys)
		}
	}
}
