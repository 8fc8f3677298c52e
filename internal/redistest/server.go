package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/internal/proctest"
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
var ErrNotRunning = proctest.ErrNotRunning

// Options configure a started redis-server.
type Options struct {
	// AppendFsyncAlways turns on appendonly with appendfsync always, so a
	// killed and restarted server keeps every acknowledged write.
	AppendFsyncAlways bool
	// TLS, when set, makes the server speak TLS only on its port.
	TLS *TLS
	// Env is added to the server's environment ("NAME=value"), for
	// example to preload a wall-clock shim (internal/clockshim).
	Env []string
}

// TLS is a redis-server's TLS setup: PEM files, and the client
// configuration the readiness check dials with.
type TLS struct {
	CertFile, KeyFile, CAFile string
	AuthClients               bool        // tls-auth-clients: clients must present a certificate
	Client                    *tls.Config // how the readiness check connects
}

// Server is one redis-server process started by this package. Its methods
// are safe for concurrent use; PID, Kill, Stop, Pause (SIGSTOP: it keeps its
// connections but answers nothing) and Resume come from proctest.Proc.
type Server struct {
	dir  string
	port int
	opts Options
	proctest.Proc
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
	ports, err := proctest.FreePorts(1)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, port: ports[0], opts: opts}
	return s, s.Restart()
}

// Addr is the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Dir is the server's data directory; its log is redis.log in there.
func (s *Server) Dir() string { return s.dir }

// Restart starts the server again on the same port and data directory and
// waits until it answers PING. It fails if the server is running.
func (s *Server) Restart() error {
	cmd := exec.Command(Binary, s.args()...)
	if len(s.opts.Env) > 0 {
		cmd.Env = append(os.Environ(), s.opts.Env...)
	}
	log := filepath.Join(s.dir, "redis.log")
	if err := s.Start(cmd, log); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	if err := waitReady(s.Addr(), s.opts.TLS, s.Exited(), ReadyTimeout); err != nil {
		_ = s.Kill()
		return fmt.Errorf("redistest: %s did not start: %w (%s)\n%s", s.Addr(), err, s.State(), proctest.LogTail(log))
	}
	return nil
}

// RestartWith restarts the server as Restart does, with opts from now on:
// an operator restarting a node with another configuration (for example
// appendfsync always). Not for use while another goroutine restarts it.
func (s *Server) RestartWith(opts Options) error {
	s.opts = opts
	return s.Restart()
}

// args are redis-server's command line arguments.
func (s *Server) args() []string {
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--dir", s.dir, "--daemonize", "no", "--protected-mode", "no",
	}
	if t := s.opts.TLS; t != nil {
		auth := map[bool]string{true: "yes", false: "no"}[t.AuthClients]
		args[1] = "0"
		args = append(args, "--tls-port", strconv.Itoa(s.port), "--tls-cert-file", t.CertFile,
			"--tls-key-file", t.KeyFile, "--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", auth)
	}
	if s.opts.AppendFsyncAlways {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	return args
}

// waitReady polls PING until the server answers PONG, the process exits, or
// timeout passes.
func waitReady(addr string, t *TLS, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		err := ping(addr, t, deadline)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG after %v: %w", timeout, err)
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-poll.C:
		}
	}
}

// ping sends one PING and expects +PONG (a server still loading its data
// replies -LOADING, which counts as not ready).
func ping(addr string, t *TLS, deadline time.Time) error {
	conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
	if err != nil {
		return err
	}
	if t != nil {
		conn = tls.Client(conn, t.Client)
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
