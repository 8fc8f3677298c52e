package instance_test

import (
	"fmt"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// memorySlack is the constant the README states beside max_buffered_bytes:
// what lockproxy's own memory may add to the bytes it buffers for clients
// (a 16 KiB read buffer per connection in mid-command, the runtime's
// heap overhead on them). The test's own 100 connections and 4 MB payload
// are counted in it too.
const memorySlack = 48 << 20

// memoryLeft is what RSS may stay above its start once the clients are
// gone: pages the runtime keeps for its own structures and goroutine
// stacks, and the test's.
const memoryLeft = 16 << 20

// TestMaxBufferedBoundsMemory (memory is RSS, or under -race what Go
// holds: processMemory): 100 clients each hold a 3.9 MB partial
// request (max_request_bytes allows 4 MiB) against max_buffered_bytes of
// 64 MiB. The process's RSS grows by at most the cap plus memorySlack (on
// the old code 100 such clients took RSS to 464-479 MB with a 256 MiB cap:
// buffers grown by doubling, the garbage of the doublings, and buffers of
// refused clients allocated before the budget said no), and it comes back
// within memoryLeft of where it started once the clients are gone (on the
// old code the heap stayed at 280 MB minutes after).
func TestMaxBufferedBoundsMemory(t *testing.T) {
	const maxBuffered = 64 << 20
	cfg := embeddedConfig()
	cfg.Limits.MaxBufferedBytes = maxBuffered
	in := startInstance(t, cfg)
	// ECHO and four strings of 975,000 bytes (within max_bulk_bytes), less
	// their last 10 bytes.
	const clients, size = 100, 4 * 975_000
	req := "*5\r\n$4\r\nECHO\r\n" + strings.Repeat(fmt.Sprintf("$%d\r\n%s\r\n", 975_000, strings.Repeat("x", 975_000)), 4)
	partial := []byte(req[:len(req)-10])
	runtime.GC()
	debug.FreeOSMemory()
	base := processMemory(t)
	conns := make([]net.Conn, clients)
	var wg sync.WaitGroup
	for i := range conns {
		c, err := net.Dial("tcp", in.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		wg.Go(func() {
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, _ = c.Write(partial) // a refused client's write fails
		})
	}
	wg.Wait()
	peak := base
	var ms runtime.MemStats
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if m := processMemory(t); m > peak {
			peak = m
			runtime.ReadMemStats(&ms)
		}
	}
	t.Logf("at the peak: heap in use %d MiB, released %d MiB, from the OS %d MiB", ms.HeapInuse>>20, ms.HeapReleased>>20, ms.Sys>>20)
	refused := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if n, _ := c.Read(make([]byte, 64)); n > 0 {
			refused++
		}
	}
	t.Logf("%d clients x %d-byte partial request, max_buffered_bytes %d MiB: %d refused; memory %d MiB -> peak %d MiB (+%d MiB)",
		clients, size, maxBuffered>>20, refused, base>>20, peak>>20, (peak-base)>>20)
	for _, c := range conns {
		c.Close()
	}
	after := peak
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		if after = processMemory(t); after-base <= memoryLeft {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after the clients left: memory %d MiB (+%d MiB) within %v", after>>20, (after-base)>>20, time.Since(start).Round(100*time.Millisecond))
	if peak-base > maxBuffered+memorySlack {
		t.Errorf("memory grew by %d MiB, over max_buffered_bytes (%d MiB) + %d MiB", (peak-base)>>20, maxBuffered>>20, memorySlack>>20)
	}
	if after-base > memoryLeft {
		t.Errorf("memory still %d MiB over its start 30 s after the clients left, want at most %d MiB", (after-base)>>20, memoryLeft>>20)
	}
}
