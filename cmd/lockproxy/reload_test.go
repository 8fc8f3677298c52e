package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// reloadLine is the part of a reload log line this test reads.
type reloadLine struct {
	Msg, Listen, Error string
	Applied, Keys      []string
}

// nextLine reads log lines until one whose message contains msg, for at
// most a minute (the child is killed at cleanup, which ends a read still
// under way).
func nextLine(t *testing.T, sc *bufio.Scanner, msg string) reloadLine {
	t.Helper()
	found := make(chan reloadLine, 1)
	go func() {
		defer close(found)
		for sc.Scan() {
			var l reloadLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && strings.Contains(l.Msg, msg) {
				found <- l
				return
			}
		}
	}()
	select {
	case l, ok := <-found:
		if ok {
			return l
		}
		t.Fatalf("no log line %q: %v", msg, sc.Err())
	case <-time.After(time.Minute):
		t.Fatalf("no log line %q within a minute", msg)
	}
	return reloadLine{}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestSIGHUPReloads runs the real main: SIGHUP re-reads the config file and
// the password file, applies the new password, log level and max_clients,
// names what needs a restart (max_waiters), survives a broken config, and
// never stops serving.
func TestSIGHUPReloads(t *testing.T) {
	dir := t.TempDir()
	pw, conf := filepath.Join(dir, "pw"), filepath.Join(dir, "lockproxy.toml")
	writeFile(t, pw, "first\n")
	writeFile(t, conf, "listen = \"127.0.0.1:0\"\npassword_file = \""+pw+"\"\n")
	child, sc := startMain(t, "--config "+conf)
	addr := nextLine(t, sc, "lockproxy serving").Listen
	ctx := context.Background()
	ping := func(pass string) error {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: pass, MaxRetries: -1})
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	if err := ping("first"); err != nil {
		t.Fatal(err)
	}

	writeFile(t, pw, "second\n")
	writeFile(t, conf, "listen = \"127.0.0.1:0\"\npassword_file = \""+pw+"\"\nlog_level = \"debug\"\n[limits]\nmax_clients = 5\nmax_waiters = 5\n")
	if err := child.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	applied := nextLine(t, sc, "configuration reloaded")
	for _, k := range []string{"password", "log_level", "limits.max_clients"} {
		if !slices.Contains(applied.Applied, k) {
			t.Errorf("applied %v lacks %s", applied.Applied, k)
		}
	}
	if restart := nextLine(t, sc, "need a restart"); !slices.Equal(restart.Keys, []string{"limits.max_waiters"}) {
		t.Errorf("restart keys %v", restart.Keys)
	}
	nextLine(t, sc, "log level changed")
	if err := ping("second"); err != nil {
		t.Fatalf("the new password: %v", err)
	}
	if err := ping("first"); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("the old password: %v", err)
	}

	writeFile(t, conf, "max_clients = 5\n") // a key outside its table: unknown
	if err := child.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if l := nextLine(t, sc, "not reloaded"); !strings.Contains(l.Error, "unknown keys") {
		t.Errorf("broken config: %+v", l)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if err := ping("second"); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
	stopChild(t, child)
}
