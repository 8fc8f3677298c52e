package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
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
//
// It returns once every thread of the process has stopped: kill(2) only
// queues SIGSTOP, and a thread already running on another CPU can serve a
// request in between (a paused ZooKeeper answered "ruok" once).
func (p *Proc) Pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.mu.Lock()
	pid := 0
	if p.run != nil {
		pid = p.run.cmd.Process.Pid
	}
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for pid != 0 && !stopped(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("proctest: process %d not stopped 5s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// stopped reports whether every thread of process pid is stopped (state T
// in /proc/PID/task/*/stat), or the process is gone.
func stopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return true
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if st := b[i+2]; st != 'T' && st != 't' && st != 'Z' && st != 'X' {
			return false
		}
	}
	return true
}

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
