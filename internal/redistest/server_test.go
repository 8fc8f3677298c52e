package redistest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestStartPing(t *testing.T) {
	s := Start(t, Options{})
	if s.PID() == 0 {
		t.Fatal("PID is 0 for a running server")
	}
	if err := client(t, s).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "redis.log")); err != nil {
		t.Errorf("log file: %v", err)
	}
}

func TestKillRestartKeepsData(t *testing.T) {
	s := Start(t, Options{AppendFsyncAlways: true})
	ctx := context.Background()
	c := client(t, s)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.PID() != 0 {
		t.Error("PID is not 0 after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded on a killed server")
	}
	if err := s.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Kill = %v, want ErrNotRunning", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := client(t, s).Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after restart = %q, %v; want \"v\"", got, err)
	}
}

func TestRestartWhileRunningFails(t *testing.T) {
	s := Start(t, Options{})
	if err := s.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t, Options{})
	c := client(t, s)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), nil, time.Now().Add(100*time.Millisecond)); err == nil {
		t.Fatal("PING answered by a paused server")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestStopIdempotent(t *testing.T) {
	s, err := StartProcess(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	if err := s.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Pause after Stop = %v, want ErrNotRunning", err)
	}
}

func TestStartN(t *testing.T) {
	servers := StartN(t, 3, Options{})
	seen := map[string]bool{}
	for _, s := range servers {
		seen[s.Addr()] = true
		if err := client(t, s).Ping(context.Background()).Err(); err != nil {
			t.Errorf("%s: %v", s.Addr(), err)
		}
	}
	if len(seen) != 3 {
		t.Errorf("addresses %v are not distinct", seen)
	}
}

func TestMissingBinaryIsAnError(t *testing.T) {
	old := Binary
	Binary = "redis-server-does-not-exist"
	defer func() { Binary = old }()
	if _, err := StartProcess(t.TempDir(), Options{}); err == nil {
		t.Fatal("StartProcess succeeded without a binary")
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	old := Binary
	Binary = "false" // exits at once, as a misconfigured server would
	defer func() { Binary = old }()
	_, err := StartProcess(t.TempDir(), Options{})
	if err == nil {
		t.Fatal("StartProcess succeeded with a binary that exits")
	}
	if !strings.Contains(err.Error(), "redis.log tail") {
		t.Errorf("error does not show the log: %v", err)
	}
}
