package rawconn

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// BenchmarkPing sends PING to a real redis-server and reads +PONG, one
// round trip at a time, as lockproxy waits on a server: the process is idle
// between round trips. cpu-µs/op is this process's CPU time (user and
// system) per round trip; the wake-ups rawconn saves show there more than
// in ns/op.
func BenchmarkPing(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	for _, w := range wraps {
		b.Run(w.name, func(b *testing.B) {
			nc, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				b.Fatal(err)
			}
			c := w.wrap(nc)
			defer c.Close()
			ping, pong := []byte("PING\r\n"), make([]byte, len("+PONG\r\n"))
			start := cpuTime()
			for b.Loop() {
				if _, err := c.Write(ping); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, pong); err != nil {
					b.Fatal(err)
				}
			}
			if string(pong) != "+PONG\r\n" {
				b.Fatalf("reply %q", pong)
			}
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
