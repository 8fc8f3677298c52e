package main

import (
	"encoding/json"
	"testing"

	"github.com/lockproxy/lockproxy/server"
)

func TestThreadsChoice(t *testing.T) {
	zk := server.Default()
	zk.Backend = "zookeeper"
	redlock := server.Default()
	redlock.Backend = "redlock"
	set := zk
	set.Threads = 3
	for _, tc := range []struct {
		name string
		cfg  server.Config
		env  string
		n    int
		why  string
	}{
		{"zookeeper", zk, "", 1, "zookeeper backend"},
		{"redlock", redlock, "", 0, "one per CPU"},
		{"embedded", server.Default(), "", 0, "one per CPU"},
		{"environment", zk, "4", 0, "GOMAXPROCS"},
		{"setting", set, "4", 3, "threads"},
	} {
		if n, why := threads(tc.cfg, tc.env); n != tc.n || why != tc.why {
			t.Errorf("%s: %d (%s), want %d (%s)", tc.name, n, why, tc.n, tc.why)
		}
	}
}

func TestThreadsFlagAndKey(t *testing.T) {
	cfg, err := configure([]string{"--config", writeConfig(t, "threads = 2\n")})
	if err != nil || cfg.Threads != 2 {
		t.Fatalf("threads = 2 in the file: %d, %v", cfg.Threads, err)
	}
	cfg, err = configure([]string{"--config", writeConfig(t, "threads = 2\n"), "--threads", "5"})
	if err != nil || cfg.Threads != 5 {
		t.Fatalf("--threads 5 over the file: %d, %v", cfg.Threads, err)
	}
}

// TestThreadsAreSet runs the real main in a child process and reads what it
// logs about its threads: GOMAXPROCS as the process really has it.
func TestThreadsAreSet(t *testing.T) {
	// Nothing listens on port 1: the zookeeper backend keeps dialling, and
	// the threads line comes before that.
	zk := "--listen 127.0.0.1:0 --backend zookeeper --zk 127.0.0.1:1"
	for _, tc := range []struct {
		name, args, env string // env "": no GOMAXPROCS
		want            int
		why             string
	}{
		{"zookeeper", zk, "", 1, "zookeeper backend"},
		{"environment", zk, "2", 2, "GOMAXPROCS"},
		{"setting", zk + " --threads 3", "1", 3, "threads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, why := childThreads(t, tc.args, tc.env)
			if n != tc.want || why != tc.why {
				t.Fatalf("gomaxprocs %d set by %q, want %d by %q", n, why, tc.want, tc.why)
			}
		})
	}
}

// childThreads starts main with args and GOMAXPROCS=env (unset when empty)
// and returns what its threads line says.
func childThreads(t *testing.T, args, env string) (int, string) {
	t.Helper()
	var extra []string
	if env != "" {
		extra = append(extra, "GOMAXPROCS="+env)
	}
	_, sc := startMain(t, args, extra...)
	for sc.Scan() {
		var line struct {
			Msg        string
			GOMAXPROCS int    `json:"gomaxprocs"`
			SetBy      string `json:"set_by"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "threads" {
			return line.GOMAXPROCS, line.SetBy
		}
	}
	t.Fatalf("lockproxy logged no threads line: %v", sc.Err())
	return 0, ""
}
