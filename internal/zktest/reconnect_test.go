package zktest_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/internal/zktest"
)

// TestReconnectWithWatchesUnderTraffic reconnects a go-zookeeper session
// that holds watches while requests are in flight: on each reconnect the
// library sends its watches again (reading the last zxid seen) while the new
// connection's reader records the zxid of every reply. Under -race, v1.0.4
// as released reports that read and write (go-zookeeper/zk PR #35, open);
// third_party/go-zookeeper/zk makes both atomic.
func TestReconnectWithWatchesUnderTraffic(t *testing.T) {
	server := zktest.Start(t)
	const sessions = 4 // each reconnect races at random: several at once fail reliably
	var wg sync.WaitGroup
	for i := 0; i < sessions; i++ {
		proxy := zktest.NewProxy(t, server.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := reconnectUnderTraffic(proxy, fmt.Sprintf("/w%d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// reconnectUnderTraffic cuts the session's connection through proxy
// repeatedly while it holds exist watches under root and 32 goroutines
// read root.
func reconnectUnderTraffic(proxy *zktest.Proxy, root string) error {
	conn, _, err := zk.Connect([]string{proxy.Addr()}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		return err
	}
	for i := 0; i < 20; i++ {
		if _, _, _, err := conn.ExistsW(fmt.Sprintf("%s/%d", root, i)); err != nil {
			return err
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _, _ = conn.Get(root) // fails while cut; that is expected
			}
		}()
	}
	const reconnects = 20
	for i := 0; i < reconnects; i++ {
		proxy.Cut()
		proxy.Restore()
		deadline := time.Now().Add(20 * time.Second)
		for conn.State() != zk.StateHasSession {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: reconnect %d: no session within 20s (state %v)", root, i, conn.State())
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // replies on the new connection
	}
	if _, _, err := conn.Get(root); err != nil {
		return fmt.Errorf("%s: after %d reconnects: %v", root, reconnects, err)
	}
	return nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
