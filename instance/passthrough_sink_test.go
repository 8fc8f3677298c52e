package instance_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPassthroughClientNotReadingStallsNoOne: a client that pipelines
// commands with large replies and reads none of them does not hold up
// another client whose commands share its upstream connection (the
// connection's reader writes replies to clients, and must never block on
// one); the first client then gets all its replies, whole and in order.
func TestPassthroughClientNotReadingStallsNoOne(t *testing.T) {
	const n, size = 300, 64 << 10 // far more than the socket buffers hold
	p := startPassthrough(t, "lock:*")
	k := uniqueKey(t)
	ctx := context.Background()
	setup := newClient(t, p.in.Addr(), 2)
	if err := setup.Set(ctx, k, strings.Repeat("v", size), 0).Err(); err != nil {
		t.Fatal(err)
	}

	// Clients share an upstream connection when their ids are equal modulo
	// the number of shared connections (one per CPU): among GOMAXPROCS+1
	// connections, two do.
	procs := runtime.GOMAXPROCS(0)
	byRest := map[int64]net.Conn{}
	var slow, other net.Conn
	for range procs + 1 {
		nc, err := net.DialTimeout("tcp", p.in.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.WriteString(nc, "CLIENT ID\r\n"); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(nc).ReadString('\n')
		id, perr := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, ":")), 10, 64)
		if err != nil || perr != nil {
			t.Fatalf("CLIENT ID: %q %v %v", line, err, perr)
		}
		if first, ok := byRest[id%int64(procs)]; ok {
			slow, other = first, nc
			break
		}
		byRest[id%int64(procs)] = nc
	}

	var b strings.Builder
	for range n {
		b.WriteString("GET " + k + "\r\n")
	}
	if _, err := io.WriteString(slow, b.String()); err != nil {
		t.Fatal(err)
	}
	// The other client's commands are answered meanwhile, each well within
	// the upstream timeout.
	r := bufio.NewReader(other)
	for i := range 50 {
		_ = other.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(other, "INCR "+k+":n\r\n"); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if want := ":" + strconv.Itoa(i+1) + "\r\n"; err != nil || line != want {
			t.Fatalf("INCR %d while a client does not read: %q, %v", i+1, line, err)
		}
	}
	sr := bufio.NewReader(slow)
	head := "$" + strconv.Itoa(size) + "\r\n"
	body := make([]byte, size+2)
	for i := range n {
		line, err := sr.ReadString('\n')
		if err != nil || line != head {
			t.Fatalf("reply %d: %q, %v", i, line, err)
		}
		if _, err := io.ReadFull(sr, body); err != nil || string(body[size:]) != "\r\n" || strings.Trim(string(body[:size]), "v") != "" {
			t.Fatalf("reply %d: body broken, %v", i, err)
		}
	}
}
