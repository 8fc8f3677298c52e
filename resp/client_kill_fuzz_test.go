package resp

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParseKill: CLIENT KILL's options, as a client sends them, never
// panic; an accepted set is an even list of known options whose ID is
// positive.
func FuzzParseKill(f *testing.F) {
	for _, s := range []string{"ID 1", "ADDR 127.0.0.1:1 SKIPME no", "TYPE pubsub", "USER default", "USER alice TYPE normal", "ID 0", "ID", "LADDR x ID -1", "skipme YES id 99999999999999999999"} {
		f.Add([]byte(s))
	}
	s := &Server{}
	s.SetUsers([]User{{Name: "alice"}})
	f.Fuzz(func(t *testing.T, in []byte) {
		opts := bytes.Fields(in)
		var k killFilter
		msg := s.parseKill(&k, opts)
		if msg != "" {
			if !strings.HasPrefix(msg, "ERR ") || strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("error %q", msg)
			}
			return
		}
		if len(opts)%2 != 0 {
			t.Fatalf("odd options accepted: %q", in)
		}
		for i := 0; i < len(opts); i += 2 {
			if strings.EqualFold(string(opts[i]), "ID") && k.id == 0 {
				t.Fatalf("ID accepted as 0: %q", in)
			}
		}
	})
}
