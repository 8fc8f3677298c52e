package passthrough

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzClassify: any command a client sends is routed without panicking,
// and the keys it is routed by are among its arguments.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"DEL lock:a cache:b", "EVAL x 2 lock:a k", "EVAL x -1", "EVAL x 9 a", "MSET a 1 b",
		"BLPOP a b 0", "SET lock:a v NX", "RENAME lock:a", "SUBSCRIBE c", "GET", "SORT l BY x STORE lock:a LIMIT 0",
		"BITOP AND lock:a b", "GEORADIUS g 0 0 1 km STORE", "ZUNIONSTORE d 99 a", "XREAD STREAMS a b c", "XREAD STREAMS",
		"MIGRATE h 1 k 0 1 KEYS", "OBJECT ENCODING lock:a", "LMPOP -1 a"} {
		f.Add(s)
	}
	routers := []*Router{New(Config{}), New(Config{LockKeys: []string{"lock:*", "*:lock", "[a-"}})}
	f.Fuzz(func(t *testing.T, line string) {
		var args [][]byte
		for _, a := range strings.Fields(line) {
			args = append(args, []byte(a))
		}
		if len(args) == 0 {
			return
		}
		name := strings.ToLower(string(args[0]))
		for _, k := range keysOf(name, args) {
			found := false
			for _, a := range args[1:] {
				found = found || bytes.Equal(a, k)
			}
			if !found {
				t.Fatalf("key %q of %q is not an argument", k, line)
			}
		}
		for _, r := range routers {
			_ = r.classify(name, args)
		}
	})
}
