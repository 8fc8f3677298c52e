package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// logLine is the part of a JSON log line these tests read.
type logLine struct {
	TS, Level, Msg, Listen, Version, Backend string
	Nodes                                    []string
}

// readUntilServing returns the child's log lines up to and including
// "lockproxy serving", then keeps draining the rest.
func readUntilServing(t *testing.T, args string, env ...string) []logLine {
	t.Helper()
	_, sc := startMain(t, args, env...)
	var lines []logLine
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON log line: %q", sc.Text())
		}
		lines = append(lines, l)
		if l.Msg == "lockproxy serving" {
			go func() {
				for sc.Scan() {
				}
			}()
			return lines
		}
	}
	t.Fatalf("lockproxy never said it was serving: %v %+v", sc.Err(), lines)
	return nil
}

// TestStartupLogAndPasswordFile runs the real main over two real Redis
// nodes with the password in a file: the log has ISO-8601 timestamps,
// warns that two nodes tolerate no failure, and names the version, the
// backend and its nodes; clients need the file's password.
func TestStartupLogAndPasswordFile(t *testing.T) {
	// appendfsync always: the restart rule counts fresh nodes without fsync only
	// a max_lease_ms after their start.
	nodes := redistest.StartN(t, 2, redistest.Options{AppendFsyncAlways: true})
	addrs := []string{nodes[0].Addr(), nodes[1].Addr()}
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lines := readUntilServing(t, "--listen 127.0.0.1:0 --nodes "+strings.Join(addrs, ",")+" --password-file "+pwFile)
	iso := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})$`)
	for _, l := range lines {
		if !iso.MatchString(l.TS) {
			t.Errorf("timestamp %q is not ISO-8601 (%q)", l.TS, l.Msg)
		}
	}
	if !slices.ContainsFunc(lines, func(l logLine) bool {
		return l.Level == "warn" && strings.Contains(l.Msg, "2 redlock node(s)")
	}) {
		t.Errorf("no warning about two nodes: %+v", lines)
	}
	serving := lines[len(lines)-1]
	if serving.Version != instance.Version || serving.Backend != "redlock" || !slices.Equal(serving.Nodes, addrs) {
		t.Errorf("start-up line %+v; want version %s, backend redlock, nodes %v", serving, instance.Version, addrs)
	}

	ctx := context.Background()
	anon := redis.NewClient(&redis.Options{Addr: serving.Listen})
	defer anon.Close()
	if err := anon.Do(ctx, "LOCK", "k", "PX", 1000).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("without the password: %v", err)
	}
	authed := redis.NewClient(&redis.Options{Addr: serving.Listen, Password: "s3cret"})
	defer authed.Close()
	// NOQUORUM (a node slower than the 250 ms node timeout on a loaded
	// machine) is an answer past AUTH; try again, at most 100 times in 30 s.
	err := authed.Do(ctx, "LOCK", t.Name(), "PX", 1000).Err()
	for deadline, i := time.Now().Add(30*time.Second), 0; err != nil && strings.HasPrefix(err.Error(), "NOQUORUM") && i < 100 && time.Now().Before(deadline); i++ {
		time.Sleep(100 * time.Millisecond)
		err = authed.Do(ctx, "LOCK", t.Name(), "PX", 1000).Err()
	}
	if err != nil {
		t.Fatalf("with the file's password: %v", err)
	}
}

// TestPasswordFromEnvironment: LOCKPROXY_PASSWORD sets the password
// without a flag that ps would show.
func TestPasswordFromEnvironment(t *testing.T) {
	lines := readUntilServing(t, "--listen 127.0.0.1:0", envPassword+"=from-env")
	addr := lines[len(lines)-1].Listen
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, Password: "from-env"})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("with the environment's password: %v", err)
	}
	bad := redis.NewClient(&redis.Options{Addr: addr, Password: "guess"})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("with a wrong password: %v", err)
	}
}
