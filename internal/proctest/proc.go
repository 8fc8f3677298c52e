package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// ErrNotRunning is returned by Kill, Pause and Resume when the process is
// not running.
var ErrNotRunning = errors.New("proctest: the server process is not running")

// Proc is a server process: at most one run of it at a time. Its methods
// are safe for concurrent use.
type Proc struct {
	mu  sync.Mutex
	run *run // nil when not running
}

// run is one run of the process.
type run struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
}

// Start starts cmd with its output appended to logPath. It fails if the
// process is running.
func (p *Proc) Start(cmd *exec.Cmd, logPath string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run != nil {
		return fmt.Errorf("proctest: %s is already running (pid %d)", cmd.Path, p.run.cmd.Process.Pid)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("proctest: %w", err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("proctest: start %s: %w", cmd.Path, err)
	}
	r := &run{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // a killed server exits with an error; that is expected
		log.Close()
		close(r.exited)
	}()
	p.run = r
	return nil
}

// Exited is closed when the current run ends; nil when not running.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		return nil
	}
	return p.run.exited
}

// State describes how the last run ended, for error messages.
func (p *Proc) State() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil || p.run.cmd.ProcessState == nil {
		return "running or not started"
	}
	return p.run.cmd.ProcessState.String()
}

// PID is the running process's id, or 0.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		return 0
	}
	return p.run.cmd.Process.Pid
}

// Kill sends SIGKILL and waits until the process has exited.
func (p *Proc) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		return ErrNotRunning
	}
	_ = p.run.cmd.Process.Kill() // fails only if it already exited
	<-p.run.exited
	p.run = nil
	return nil
}

// Stop is Kill that does not mind a process already stopped.
func (p *Proc) Stop() error {
	if err := p.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	return nil
}

// Pause stops the process with SIGSTOP: it keeps its connections but
// answers nothing until Resume.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		return ErrNotRunning
	}
	return p.run.cmd.Process.Signal(sig)
}

// LogTail returns the last 2000 bytes of the log at path, for an error
// message.
func LogTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return path + " tail:\n" + string(b)
}

// FreePorts asks the kernel for n distinct free loopback ports. Another
// process may take one before the server binds it; callers retry then.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("proctest: find a free port: %w", err)
		}
		defer l.Close() // held until all are picked, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
