package instance_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestNoGoroutineLeak: an instance that served bound and lease locks to
// several clients leaves no goroutine behind once it has shut down.
func TestNoGoroutineLeak(t *testing.T) {
	nodes := redistest.StartN(t, 3, redistest.Options{})
	base := runtime.NumGoroutine()
	in, err := instance.Start(testConfig(nodes), quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		c := newClient(t, in.Addr(), 2+i%2)
		mustLock(t, c, uniqueKey(t))
		mustLock(t, c, uniqueKey(t), "PX", 1000)
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after shutdown, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
