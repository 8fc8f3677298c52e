package passthrough

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/tidwall/redcon"
)

var replySeeds = []string{
	"+OK\r\n", "-ERR x\r\n", ":42\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*-1\r\n", "_\r\n",
	"*2\r\n$1\r\na\r\n:1\r\n", "%1\r\n+k\r\n*1\r\n#t\r\n", "~1\r\n,1.5\r\n", "(123\r\n",
	"|1\r\n+ttl\r\n:3\r\n$2\r\nhi\r\n", ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
	"=7\r\ntxt:abc\r\n", "!3\r\nERR\r\n", "*1\r\n*1\r\n*1\r\n:1\r\n",
}

// TestReadReply checks each seed is read whole and nothing more.
func TestReadReply(t *testing.T) {
	for _, s := range replySeeds {
		r := bufio.NewReader(bytes.NewBufferString(s + "+NEXT\r\n"))
		got, err := readReply(r, nil)
		if err != nil || string(got) != s {
			t.Errorf("readReply(%q) = %q, %v", s, got, err)
		}
	}
	for _, bad := range []string{"?x\r\n", "$5\r\nab\r\n", "*2\r\n:1\r\n", "$-2\r\n", "+OK\n", "$3\r\nabcde"} {
		if got, err := readReply(bufio.NewReader(bytes.NewBufferString(bad)), nil); err == nil {
			t.Errorf("readReply(%q) = %q, want an error", bad, got)
		}
	}
}

// FuzzReadReply: whatever the upstream sends, readReply returns a prefix of
// it without panicking, and reads each RESP2 reply redcon's parser accepts
// to its end.
func FuzzReadReply(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readReply(bufio.NewReaderSize(bytes.NewReader(in), 16), nil)
		if err == nil && !bytes.HasPrefix(in, got) {
			t.Fatalf("read %q, not a prefix of %q", got, in)
		}
		if err == nil { // a blocking pop's reply is decoded to put its element back
			for _, name := range []string{"blpop", "blmpop", "bzpopmin", "bzmpop"} {
				_ = restore(name, [][]byte{[]byte(name), []byte("RIGHT")}, got)
			}
			(&relay{}).count(got) // a relayed frame's subscription count
		}
		// A RESP2 reply redcon accepts (it also checks integers, which
		// the relay passes through as they are) is read to the same end.
		if n, _ := redcon.ReadNextRESP(in); n > 0 && (err != nil || n != len(got)) {
			t.Fatalf("read %d bytes of %q (%v), redcon reads %d", len(got), in, err, n)
		}
	})
}
