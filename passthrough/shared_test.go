package passthrough

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestSharedRepliesReachTheirCallers: many callers pipelining on one shared
// connection each get the reply to their own command, in RESP2 and RESP3.
func TestSharedRepliesReachTheirCallers(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	for _, proto := range []int{2, 3} {
		u, err := dial(Config{Addr: data.Addr(), Timeout: 10 * time.Second}, proto)
		if err != nil {
			t.Fatal(err)
		}
		s := newShared(u, 10*time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := 0; i < 32; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				key := fmt.Sprintf("p%d:c%d", proto, i)
				for n := 1; n <= 200; n++ {
					reply, err := s.do([][]byte{[]byte("INCR"), []byte(key)}, 30*time.Second)
					if want := ":" + strconv.Itoa(n) + "\r\n"; err != nil || string(reply) != want {
						errs <- fmt.Errorf("%s: INCR %d got %q, %v", key, n, reply, err)
						return
					}
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		s.close()
		if _, err := s.do([][]byte{[]byte("PING")}, time.Second); err == nil {
			t.Error("a closed shared connection took a call")
		}
	}
}

// TestSharedDataRedisGone: when the data Redis dies, waiting callers get an
// error rather than hanging, and the connection reports itself broken.
func TestSharedDataRedisGone(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	u, err := dial(Config{Addr: data.Addr(), Timeout: 10 * time.Second}, 2)
	if err != nil {
		t.Fatal(err)
	}
	s := newShared(u, 10*time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := s.do([][]byte{[]byte("BLPOP"), []byte("never"), []byte("0")}, time.Minute)
		done <- err
	}()
	if err := data.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("a call on a dead data Redis returned no error")
	}
	if !s.broken() {
		t.Fatal("connection not marked broken")
	}
}

// TestSharedOutlivesSetupDeadline: the deadline of the set-up commands
// (HELLO 3 here) does not stay on a shared connection and break it later.
func TestSharedOutlivesSetupDeadline(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	const setup = 200 * time.Millisecond
	u, err := dial(Config{Addr: data.Addr(), Timeout: setup}, 3)
	if err != nil {
		t.Fatal(err)
	}
	s := newShared(u, 10*time.Second)
	defer s.close()
	start := time.Now()
	for n := 0; n < 100000 && time.Since(start) < 5*setup; n++ {
		if _, err := s.do([][]byte{[]byte("PING")}, 10*time.Second); err != nil {
			t.Fatalf("after %v: %v", time.Since(start), err)
		}
	}
}

// TestSharedPausedDataRedis: when the data Redis stops answering (SIGSTOP),
// calls on a shared connection fail with the timeout, not before it, their
// outcome unknown, and the connection is broken once a second timeout
// passed with no reply, so that no late reply answers a later caller.
func TestSharedPausedDataRedis(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	u, err := dial(Config{Addr: data.Addr(), Timeout: 10 * time.Second}, 2)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 500 * time.Millisecond
	s := newShared(u, timeout)
	defer s.close()
	if _, err := s.do([][]byte{[]byte("PING")}, timeout); err != nil {
		t.Fatal(err)
	}
	if err := data.Pause(); err != nil {
		t.Fatal(err)
	}
	defer data.Resume()
	errs := make(chan error, 2)
	start := time.Now()
	for i := 0; i < 2; i++ {
		go func() {
			_, err := s.do([][]byte{[]byte("GET"), []byte("k")}, timeout)
			errs <- err
		}()
	}
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "no reply within the timeout") {
				t.Fatalf("call %d on a paused data Redis: %v", i, err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a call on a paused data Redis never returned")
		}
	}
	if elapsed := time.Since(start); elapsed < timeout {
		t.Fatalf("calls failed after %v, before their %v timeout", elapsed, timeout)
	}
	if !s.broken() {
		t.Fatal("connection not marked broken after a timeout")
	}
}

// TestSharedSlowCommandDoesNotFailOthers: one caller's command that runs
// past the timeout (a busy script, as DEBUG SLEEP) is told its outcome is unknown, while a
// command sent behind it by another caller, which the data Redis runs once
// the sleep ends, gets its own reply: its timeout counts from the reply
// before it. Issue 27 §3.
func TestSharedSlowCommandDoesNotFailOthers(t *testing.T) {
	data := redistest.Start(t, redistest.Options{})
	u, err := dial(Config{Addr: data.Addr(), Timeout: 10 * time.Second}, 2)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = time.Second
	s := newShared(u, timeout)
	defer s.close()
	slow := getCall(time.Now().Add(timeout))
	if err := s.send(slow, busyScript(2*time.Second)); err != nil { // written when send returns
		t.Fatal(err)
	}
	reply, err := s.do([][]byte{[]byte("INCR"), []byte("x")}, timeout)
	if err != nil || string(reply) != ":1\r\n" {
		t.Fatalf("INCR behind another caller's slow script: %q, %v", reply, err)
	}
	if _, err := s.wait(slow); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("slow script past the timeout: %v, want an unknown outcome", err)
	}
	if reply, err := s.do([][]byte{[]byte("GET"), []byte("x")}, timeout); err != nil || string(reply) != "$1\r\n1\r\n" {
		t.Fatalf("GET after: %q, %v", reply, err)
	}
}

// busyScript is an EVAL that keeps the data Redis busy for d, as DEBUG
// SLEEP does (which redis-server 7 refuses unless enable-debug-command).
func busyScript(d time.Duration) [][]byte {
	const src = `local t = redis.call('TIME'); local from = t[1] * 1000000 + t[2]
while true do t = redis.call('TIME'); if t[1] * 1000000 + t[2] - from >= tonumber(ARGV[1]) then return 1 end end`
	return [][]byte{[]byte("EVAL"), []byte(src), []byte("0"), strconv.AppendInt(nil, d.Microseconds(), 10)}
}
