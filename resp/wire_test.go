package resp

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReaderGivesBuffersBack: a connection reads a pipelined batch larger
// than its own buffer, then a command larger than a borrowed one, and
// holds neither buffer once it has nothing incomplete left.
func TestReaderGivesBuffersBack(t *testing.T) {
	cli, srv := net.Pipe()
	defer cli.Close()
	defer srv.Close()
	src := fixedLimits(Limits{})
	r := cmdReader{g: newGuard(srv, src, newBudget(src.Load().MaxBuffered))}
	big := strings.Repeat("x", 3*readChunk)
	go func() {
		_, _ = cli.Write([]byte(strings.Repeat("*1\r\n$4\r\nPING\r\n", 100)))
		_, _ = cli.Write([]byte("*2\r\n$4\r\nECHO\r\n$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n"))
	}()
	for _, want := range []int{100, 1} {
		got := 0
		deadline := time.Now().Add(time.Minute)
		for got < want && time.Now().Before(deadline) {
			cmds, err := r.next(nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, raw := range cmds {
				if _, ok, err := parseCommand(raw); !ok || err != nil {
					t.Fatalf("command %q: %v", raw, err)
				}
			}
			got += len(cmds)
		}
		if got != want {
			t.Fatalf("read %d commands, want %d", got, want)
		}
		r.make() // what the next read would read into
		if r.bufP != nil || cap(r.buf) != idleReadSize {
			t.Fatalf("after %d commands, the idle connection holds a %d-byte buffer (borrowed: %v)", want, cap(r.buf), r.bufP != nil)
		}
	}
}
