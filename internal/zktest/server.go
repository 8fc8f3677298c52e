package zktest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Script is the zkServer.sh that starts a server.
var Script = "/usr/share/zookeeper/bin/zkServer.sh"

// ReadyTimeout bounds how long a start or restart waits for the server to
// serve: standalone, or in an ensemble as leader or follower.
var ReadyTimeout = 30 * time.Second

// TickTime is the servers' tick, in ms: sessions may time out between 2 and
// 20 ticks (400 ms to 4 s).
const TickTime = 200

// jvmFlags keep each JVM small and quick to start, and make the server
// remove empty container nodes quickly, so tests can see it.
const jvmFlags = "-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto" +
	" -Dznode.container.checkIntervalMs=200" // empty container nodes go within 0.2 s, not 60 s

// ErrNotRunning is returned by Kill, Pause and Resume when the server's
// process is not running.
var ErrNotRunning = errors.New("zktest: zookeeper is not running")

// Server is one ZooKeeper server process started by this package. Its
// methods are safe for concurrent use.
type Server struct {
	dir  string
	id   int // myid in an ensemble; 0 standalone
	port int // client port

	mu   sync.Mutex
	proc *process // nil when not running
}

type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// Addr is the client address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir holds the server's zoo.cfg, data and out.log.
func (s *Server) Dir() string { return s.dir }

// PID is the running server's process id, or 0.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// writeConfig writes zoo.cfg; peers are the ensemble's "server.N=" lines.
func (s *Server) writeConfig(peers []string) error {
	data := filepath.Join(s.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	cfg := []string{
		"tickTime=" + strconv.Itoa(TickTime), "initLimit=10", "syncLimit=5",
		"dataDir=" + data, "clientPort=" + strconv.Itoa(s.port), "clientPortAddress=127.0.0.1",
		"admin.enableServer=false", "4lw.commands.whitelist=*", "maxSessionTimeout=20000",
	}
	cfg = append(cfg, peers...)
	if s.id > 0 {
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(s.id)+"\n"), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(strings.Join(cfg, "\n")+"\n"), 0o644)
}

// launch starts the server without waiting for it.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return fmt.Errorf("zktest: %s is already running (pid %d)", s.Addr(), s.proc.cmd.Process.Pid)
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "out.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	cmd := exec.Command(Script, "start-foreground", filepath.Join(s.dir, "zoo.cfg"))
	cmd.Env = append(os.Environ(), "ZOOCFGDIR="+s.dir, "JVMFLAGS="+jvmFlags)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no stray JVM if the test binary dies
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("zktest: start %s: %w", Script, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), log: log}
	go func() {
		_ = cmd.Wait() // a killed server exits with an error; that is expected
		log.Close()
		close(p.exited)
	}()
	s.proc = p
	return nil
}

// Restart starts the server again on the same ports and data and waits
// until it serves. It fails if the server is running.
func (s *Server) Restart() error {
	if err := s.launch(); err != nil {
		return err
	}
	return s.waitServing(ReadyTimeout)
}

// waitServing polls "srvr" until the server reports a serving mode, the
// process exits, or timeout passes.
func (s *Server) waitServing(timeout time.Duration) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return ErrNotRunning
	}
	deadline := time.Now().Add(timeout)
	for {
		mode, err := s.Mode()
		if err == nil && mode != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: %s not serving after %v (mode %q, %v)\n%s", s.Addr(), timeout, mode, err, s.logTail())
		}
		select {
		case <-p.exited:
			return fmt.Errorf("zktest: %s exited: %s\n%s", s.Addr(), p.cmd.ProcessState, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Mode is what the server says it is — "standalone", "leader" or
// "follower" — or "" while it is not serving.
func (s *Server) Mode() (string, error) {
	out, err := FourLetter(s.Addr(), "srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			return m, nil
		}
	}
	return "", nil // "This ZooKeeper instance is not currently serving requests"
}

// FourLetter sends a four-letter-word command to addr and returns the reply.
func FourLetter(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil // the server closes after answering
		}
	}
}

// Kill sends SIGKILL and waits until the process has exited.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ErrNotRunning
	}
	_ = s.proc.cmd.Process.Kill()
	<-s.proc.exited
	s.proc = nil
	return nil
}

// Stop is Kill that does not mind a server already stopped.
func (s *Server) Stop() error {
	if err := s.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	return nil
}

// Pause stops the process with SIGSTOP; Resume continues it.
func (s *Server) Pause() error  { return s.signal(syscall.SIGSTOP) }
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ErrNotRunning
	}
	return s.proc.cmd.Process.Signal(sig)
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "out.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "out.log tail:\n" + string(b)
}

// freePorts asks the kernel for n distinct free loopback ports. Another
// process may take one before ZooKeeper binds it; starts retry then.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("zktest: find a free port: %w", err)
		}
		defer l.Close() // held until all are picked, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
