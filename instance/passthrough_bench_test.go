package instance_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// BenchmarkForwardedGet is one client's GET forwarded to the data Redis,
// a command at a time, through a raw connection that allocates nothing:
// allocs/op are lockproxy's per forwarded command. (Throughput against the
// data Redis directly is the bench module's -passthrough case.)
func BenchmarkForwardedGet(b *testing.B) {
	data := redistest.Start(b, redistest.Options{})
	nodes := redistest.StartN(b, 3, redistest.Options{})
	cfg := instance.Default()
	cfg.Listen, cfg.Backend = "127.0.0.1:0", "redlock"
	for _, n := range nodes {
		cfg.Redlock.Nodes = append(cfg.Redlock.Nodes, n.Addr())
	}
	cfg.Passthrough.Address = data.Addr()
	in, err := instance.Start(cfg, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Shutdown(ctx)
	})
	nc, err := net.DialTimeout("tcp", in.Addr(), 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	cmd := []byte("*2\r\n$3\r\nget\r\n$4\r\nbk:1\r\n")
	want := "$-1\r\n" // the key does not exist
	rd := bufio.NewReader(nc)
	got := make([]byte, len(want))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := nc.Write(cmd); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rd, got); err != nil || string(got) != want {
			b.Fatalf("reply %q, %v", got, err)
		}
	}
}
