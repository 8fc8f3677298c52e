package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Binary is the redis-server executable StartProcess runs, looked up in PATH.
var Binary = "redis-server"

// ReadyTimeout bounds how long a start or restart waits for the server to
// answer PING.
var ReadyTimeout = 10 * time.Second

// startAttempts is how many free ports StartProcess tries before giving up.
const startAttempts = 5

// ErrNotRunning is returned by Kill, Pause and Resume when the server's
// process is not running.
var ErrNotRunning = errors.New("redistest: redis-server is not running")

// Options configure a started redis-server.
type Options struct {
	// AppendFsyncAlways turns on appendonly with appendfsync always, so a
	// killed and restarted server keeps every acknowledged write.
	AppendFsyncAlways bool
}

// Server is one redis-server process started by this package. Its methods
// are safe for concurrent use.
type Server struct {
	dir  string
	port int
	opts Options

	mu   sync.Mutex
	proc *process // nil when the server is not running
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
	log    *os.File
}

// StartProcess starts redis-server with its data and log in dir and waits
// until it answers PING. It retries on a new port if the server does not
// come up (the free port may have been taken in between).
func StartProcess(dir string, opts Options) (*Server, error) {
	if _, err := exec.LookPath(Binary); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	var errs []error
	for range startAttempts {
		s, err := startOnFreePort(dir, opts)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func startOnFreePort(dir string, opts Options) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, port: port, opts: opts}
	return s, s.Restart()
}

// freePort asks the kernel for a free loopback port. Another process may take
// it before redis-server binds it; StartProcess retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Dir is the server's data directory; its log is redis.log in there.
func (s *Server) Dir() string { return s.dir }

// PID is the process id of the running server, or 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Restart starts the server again on the same port and data directory and
// waits until it answers PING. It fails if the server is running.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return fmt.Errorf("redistest: %s is already running (pid %d)", s.Addr(), s.proc.cmd.Process.Pid)
	}
	p, err := s.launch()
	if err != nil {
		return err
	}
	if err := waitReady(s.Addr(), p, ReadyTimeout); err != nil {
		p.kill()
		return fmt.Errorf("redistest: %s did not start: %w\n%s", s.Addr(), err, logTail(p.log.Name()))
	}
	s.proc = p
	return nil
}

// Kill sends SIGKILL to the server and waits for it to exit.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ErrNotRunning
	}
	s.proc.kill()
	s.proc = nil
	return nil
}

// Stop kills the server if it is running and waits for it to exit. Calling
// it again does nothing.
func (s *Server) Stop() error {
	if err := s.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	return nil
}

// Pause stops the server's process with SIGSTOP: it keeps its connections but
// answers nothing until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ErrNotRunning
	}
	return s.proc.cmd.Process.Signal(sig)
}

// args are redis-server's command line arguments.
func (s *Server) args() []string {
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--dir", s.dir, "--daemonize", "no", "--protected-mode", "no",
	}
	if s.opts.AppendFsyncAlways {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	return args
}

// launch starts redis-server with its output appended to redis.log in dir.
func (s *Server) launch() (*process, error) {
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command(Binary, s.args()...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("redistest: start %s: %w", Binary, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), log: log}
	go p.wait()
	return p, nil
}

func (p *process) wait() {
	_ = p.cmd.Wait() // a killed server exits with an error; that is expected
	p.log.Close()
	close(p.exited)
}

// kill sends SIGKILL to the process and waits until it has exited.
func (p *process) kill() {
	_ = p.cmd.Process.Kill() // fails only if it already exited
	<-p.exited
}

// waitReady polls PING until the server answers PONG, the process exits, or
// timeout passes.
func waitReady(addr string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		err := ping(addr, deadline)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG after %v: %w", timeout, err)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("redis-server exited: %s", p.cmd.ProcessState)
		case <-poll.C:
		}
	}
}

// ping sends one PING and expects +PONG (a server still loading its data
// replies -LOADING, which counts as not ready).
func ping(addr string, deadline time.Time) error {
	conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING replied %q", line)
	}
	return nil
}

// logTail returns the last lines of the server's log for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "redis.log tail:\n" + string(b)
}
