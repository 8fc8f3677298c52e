package resp

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzClientReply: CLIENT REPLY's arguments as a client sends them, in
// any sequence with other commands, never panic, and each command's
// replies are as Redis 7.0 writes them: ON writes +OK, OFF and SKIP write
// nothing, anything else one error line unless replies are off or
// skipped; a plain command's reply is written unless replies are off or
// the command follows SKIP.
func FuzzClientReply(f *testing.F) {
	for _, s := range []string{"OFF;x;ON;x", "SKIP;x;x", "SKIP;SKIP;x;x", "OFF;SKIP;x;ON", "SKIP;ON;x", "on x;;FOO;off;foo"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c := &Conn{rc: &wire{}}
		off, skip := false, false
		for _, step := range strings.Split(in, ";") {
			quiet := off || skip
			skip = false
			c.beginReplies()
			before := len(c.rc.out)
			args := [][]byte{[]byte("CLIENT"), []byte("REPLY")}
			args = append(args, bytes.Fields([]byte(step))...)
			if step == "x" {
				c.Simple("x")
			} else {
				c.clientReply(args)
			}
			got := string(c.rc.out[before:])
			c.rc.quiet = false
			mode := ""
			if len(args) == 3 {
				mode = strings.ToUpper(string(args[2]))
			}
			want := ""
			switch {
			case step == "x":
				if !quiet {
					want = "+x\r\n"
				}
			case mode == "ON":
				off, want = false, "+OK\r\n"
			case mode == "OFF":
				off = true
			case mode == "SKIP":
				skip = !off
			case !quiet:
				if !strings.HasPrefix(got, "-ERR ") || strings.Count(got, "\r\n") != 1 {
					t.Fatalf("step %q: %q, want one error line", step, got)
				}
				continue
			}
			if got != want {
				t.Fatalf("step %q of %q: wrote %q, want %q", step, in, got, want)
			}
		}
	})
}
