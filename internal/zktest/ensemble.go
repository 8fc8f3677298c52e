package zktest

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/internal/proctest"
)

// startAttempts is how many sets of free ports a start tries.
const startAttempts = 3

// StartProcess starts a standalone server with its files in dir and waits
// until it serves. It retries on new ports if the server does not come up.
func StartProcess(dir string) (*Server, error) {
	e, err := StartEnsembleProcess(dir, 1)
	if err != nil {
		return nil, err
	}
	return e.servers[0], nil
}

// Ensemble is a ZooKeeper quorum of servers started by this package.
type Ensemble struct {
	servers []*Server
}

// StartEnsembleProcess starts n servers (n = 1: standalone) with their files
// under dir and waits until every one serves.
func StartEnsembleProcess(dir string, n int) (*Ensemble, error) {
	return startEnsemble(dir, n, nil)
}

// StartEnsembleProcessEnv is StartEnsembleProcess with env(i) added to
// server i's environment (for example a wall-clock shim:
// internal/clockshim), on every start and restart.
func StartEnsembleProcessEnv(dir string, n int, env func(i int) []string) (*Ensemble, error) {
	return startEnsembleEnv(dir, n, nil, env)
}

// startEnsemble starts n servers, serving TLS as tls says if not nil.
func startEnsemble(dir string, n int, tls *TLS) (*Ensemble, error) {
	return startEnsembleEnv(dir, n, tls, nil)
}

// startEnsembleEnv is startEnsemble with env(i), when not nil, added to
// server i's environment.
func startEnsembleEnv(dir string, n int, tls *TLS, env func(i int) []string) (*Ensemble, error) {
	if _, err := exec.LookPath(Script); err != nil {
		return nil, fmt.Errorf("zktest: %w (Debian package zookeeper)", err)
	}
	var errs []error
	for attempt := range startAttempts {
		e, err := startOnFreePorts(filepath.Join(dir, "try"+strconv.Itoa(attempt)), n, tls, env)
		if err == nil {
			return e, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func startOnFreePorts(dir string, n int, tls *TLS, env func(i int) []string) (*Ensemble, error) {
	ports, err := proctest.FreePorts(4 * n) // client, quorum, election and TLS client port per server
	if err != nil {
		return nil, err
	}
	e := &Ensemble{}
	var peers []string
	for i := range n {
		s := &Server{dir: filepath.Join(dir, "zk"+strconv.Itoa(i+1)), port: ports[4*i], securePort: ports[4*i+3], tls: tls}
		if env != nil {
			s.env = env(i)
		}
		if n > 1 {
			s.id = i + 1
			peers = append(peers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", s.id, ports[4*i+1], ports[4*i+2]))
		}
		e.servers = append(e.servers, s)
	}
	for _, s := range e.servers {
		if err := s.writeConfig(peers); err != nil {
			return nil, err
		}
		if err := s.launch(); err != nil {
			e.Stop()
			return nil, err
		}
	}
	for _, s := range e.servers {
		if err := s.waitServing(ReadyTimeout); err != nil {
			e.Stop()
			return nil, err
		}
	}
	return e, nil
}

// Servers are the ensemble's servers, by id.
func (e *Ensemble) Servers() []*Server { return e.servers }

// Addrs are the servers' client addresses.
func (e *Ensemble) Addrs() []string {
	addrs := make([]string, len(e.servers))
	for i, s := range e.servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Leader is the server that says it leads, polled until one does or
// ReadyTimeout passes (after the leader is lost the others elect anew).
func (e *Ensemble) Leader() (*Server, error) {
	deadline := time.Now().Add(ReadyTimeout)
	for {
		for _, s := range e.servers {
			if m, _ := s.Mode(); m == "leader" || m == "standalone" {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("zktest: no leader after %v", ReadyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// KillLeader kills the leader with SIGKILL and waits until the others
// have elected another; it returns both.
func (e *Ensemble) KillLeader() (killed, next *Server, err error) {
	if killed, err = e.Leader(); err != nil {
		return nil, nil, err
	}
	if err = killed.Kill(); err != nil {
		return killed, nil, err
	}
	next, err = e.Leader()
	return killed, next, err
}

// WaitServing waits until every running server serves (after a restart or
// a leader change).
func (e *Ensemble) WaitServing() error {
	var errs []error
	for _, s := range e.servers {
		if s.PID() != 0 {
			errs = append(errs, s.waitServing(ReadyTimeout))
		}
	}
	return errors.Join(errs...)
}

// Stop kills every server still running.
func (e *Ensemble) Stop() error {
	var errs []error
	for _, s := range e.servers {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}
