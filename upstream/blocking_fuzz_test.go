package upstream

import (
	"bufio"
	"strings"
	"testing"
)

// FuzzReadValue: whatever bytes a node sends on a blocking connection,
// readValue returns or fails without panicking, and never builds an array
// of more than two elements.
func FuzzReadValue(f *testing.F) {
	for _, s := range []string{"*2\r\n$3\r\nkey\r\n$1\r\nv\r\n", "*-1\r\n", "$-1\r\n", ":12\r\n", "-ERR x\r\n",
		"+OK\r\n", "*3\r\n", "$999999999999\r\n", "*2\r\n*2\r\n*2\r\n*2\r\n", "\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := readValue(bufio.NewReader(strings.NewReader(s)), 0)
		if arr, ok := v.([]any); ok && (err != nil || len(arr) > 2) {
			t.Fatalf("readValue(%q) = %v, %v", s, v, err)
		}
	})
}
