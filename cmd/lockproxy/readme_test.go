package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readmeBlock is the shell block of README.md between the lines
// <!-- name:begin --> and <!-- name:end -->, without its fences.
func readmeBlock(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- "+name+":begin -->\n")
	block, _, ok2 := strings.Cut(rest, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("README.md has no %s block", name)
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l != "" && !strings.HasPrefix(l, "```") {
			lines = append(lines, l)
		}
	}
	return lines
}

// freePorts are n loopback ports free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var ports []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		_, p, _ := net.SplitHostPort(ln.Addr().String())
		ports = append(ports, p)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// TestReadmeRealNodes runs the README's path to real nodes as written —
// three redis-servers, lockproxy over them with --new-nodes, one LOCK —
// with only its ports replaced by free loopback ones (and the nodes bound
// to loopback), and wants the lock granted at the first LOCK that reaches
// lockproxy: no hold-out (issue 28 §1; before, every LOCK got NOQUORUM for
// an hour on default nodes).
func TestReadmeRealNodes(t *testing.T) {
	lines := readmeBlock(t, "real-nodes")
	if len(lines) != 3 {
		t.Fatalf("the real-nodes block has %d commands, want 3: %q", len(lines), lines)
	}
	ports := freePorts(t, 4)
	sub := strings.NewReplacer("7001", ports[0], "7002", ports[1], "7003", ports[2], "6380", ports[3])
	nodes, proxy, cli := sub.Replace(lines[0]), sub.Replace(lines[1]), sub.Replace(lines[2])
	nodes = strings.Replace(nodes, "redis-server ", "redis-server --bind 127.0.0.1 ", 1)
	proxy += " --listen 127.0.0.1:" + ports[3]
	tmp := t.TempDir() // the nodes' mktemp -d directories
	for _, p := range ports[:3] {
		t.Cleanup(func() { exec.Command("redis-cli", "-p", p, "SHUTDOWN", "NOSAVE").Run() })
	}
	start := exec.Command("bash", "-c", nodes)
	start.Env = append(os.Environ(), "TMPDIR="+tmp)
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", nodes, err, out)
	}
	served := startShell(t, proxy)
	// go run compiles first: a busy machine takes a while to serve.
	var out string
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		b, _ := exec.Command("bash", "-c", cli).CombinedOutput()
		out = string(b)
		if !strings.Contains(out, "Connection refused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockproxy not serving after 5 minutes:\n%s", served.String())
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}\n\d+\n\d+\n$`).MatchString(out) {
		t.Fatalf("%s: %q, want a grant (token, fence, validity)\nlockproxy's log:\n%s", cli, out, served.String())
	}
	if v, _ := strconv.Atoi(strings.Fields(out)[2]); v <= 0 || v > 30000 {
		t.Fatalf("validity %d", v)
	}
}

// startShell runs line with bash in a process group of its own, stopped
// (the whole group: go run and the program it built) when the test ends.
// It returns the output so far.
func startShell(t *testing.T, line string) *syncBuffer {
	t.Helper()
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir = "../.."
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return out
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's
// reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
