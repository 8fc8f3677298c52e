package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	if args := os.Getenv("LOCKPROXY_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"lockproxy"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSIGTERMDrains runs the real main in a child process over three real
// redis-servers: on SIGTERM it releases its connection-bound locks on the
// nodes and exits 0.
func TestSIGTERMDrains(t *testing.T) {
	// appendfsync always: the restart rule counts fresh nodes without fsync only
	// a max_lease_ms after their start.
	nodes := redistest.StartN(t, 3, redistest.Options{AppendFsyncAlways: true})
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	child, log := startMain(t, "--listen 127.0.0.1:0 --nodes "+strings.Join(addrs, ",")+" --config ../../config.example.toml")
	addr := waitServing(t, log)

	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Do(ctx, "LOCK", "drain-me").Err(); err != nil {
		t.Fatal(err)
	}
	stopChild(t, child)
	// The lock is free once a majority no longer holds it; a release to one
	// node that timed out on a loaded machine leaves it there until its
	// lease ends, as TestDrainReleasesBoundLocks allows.
	holding := 0
	for _, a := range addrs {
		raw := redis.NewClient(&redis.Options{Addr: a})
		n, err := raw.Exists(ctx, "drain-me").Result()
		raw.Close()
		if err != nil {
			t.Fatalf("node %s: %v", a, err)
		}
		if n != 0 {
			t.Logf("node %s still holds the bound lock after the drain", a)
			holding++
		}
	}
	if holding > len(addrs)/2 {
		t.Fatalf("%d of %d nodes still hold the bound lock after the drain", holding, len(addrs))
	}
}

// startMain runs the real main with args in a child process, which is
// killed when the test ends, and returns it and a scanner over its log
// (stderr). The child's environment is the test's, without GOMAXPROCS,
// plus env.
func startMain(t *testing.T, args string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") })
	child.Env = append(child.Env, "LOCKPROXY_TEST_MAIN_ARGS="+args)
	child.Env = append(child.Env, env...)
	stderr, err := child.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	return child, bufio.NewScanner(stderr)
}

// waitServing reads the child's JSON log until it says where it listens.
func waitServing(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	for sc.Scan() {
		var line struct{ Msg, Listen string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "lockproxy serving" {
			go func() {
				for sc.Scan() { // keep draining so the child never blocks on stderr
				}
			}()
			return line.Listen
		}
	}
	t.Fatalf("lockproxy never said it was serving: %v", sc.Err())
	return ""
}

// stopChild sends the child SIGTERM and waits for it to drain and exit 0.
func stopChild(t *testing.T, child *exec.Cmd) {
	t.Helper()
	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("lockproxy exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lockproxy did not exit after SIGTERM")
	}
}
