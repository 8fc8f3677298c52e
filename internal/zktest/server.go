package zktest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/proctest"
)

// Script is the zkServer.sh that starts a server.
var Script = "/usr/share/zookeeper/bin/zkServer.sh"

// ReadyTimeout bounds how long a start or restart waits for the server to
// serve: standalone, or in an ensemble as leader or follower.
var ReadyTimeout = 30 * time.Second

// TickTime is the servers' tick, in ms: sessions may time out between 2 and
// 20 ticks (400 ms to 4 s).
const TickTime = 200

// ContainerCheck is how often the servers remove empty container nodes:
// 0.2 s, so tests can see them go. ZooKeeper's own default is a minute.
var ContainerCheck = 200 * time.Millisecond

// jvmFlags keep each JVM small and quick to start, and set ContainerCheck.
func jvmFlags() string {
	return "-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto" +
		" -Dznode.container.checkIntervalMs=" + strconv.FormatInt(ContainerCheck.Milliseconds(), 10)
}

// ErrNotRunning is returned by Kill, Pause and Resume when the server's
// process is not running.
var ErrNotRunning = proctest.ErrNotRunning

// Server is one ZooKeeper server process started by this package. Its
// methods are safe for concurrent use; PID, Kill, Stop, Pause (SIGSTOP) and
// Resume (SIGCONT) come from proctest.Proc.
type Server struct {
	dir  string
	id   int // myid in an ensemble; 0 standalone
	port int // client port
	// securePort is the TLS client port, served when tls is set.
	securePort int
	tls        *TLS
	env        []string // added to the server's environment
	proctest.Proc
}

// Addr is the client address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir holds the server's zoo.cfg, data and out.log.
func (s *Server) Dir() string { return s.dir }

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
	secure, err := s.tlsConfig()
	if err != nil {
		return err
	}
	cfg = append(cfg, secure...)
	if s.id > 0 {
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(s.id)+"\n"), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(strings.Join(cfg, "\n")+"\n"), 0o644)
}

// launch starts the server without waiting for it.
func (s *Server) launch() error {
	cmd := exec.Command(Script, "start-foreground", filepath.Join(s.dir, "zoo.cfg"))
	flags := jvmFlags()
	if s.tls != nil {
		flags += " -cp " + classPath // the last -cp wins over zkServer.sh's
	}
	cmd.Env = append(append(os.Environ(), "ZOOCFGDIR="+s.dir, "JVMFLAGS="+flags), s.env...)
	cmd.Dir = s.dir
	if err := s.Start(cmd, s.log()); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	return nil
}

// log is the server's output.
func (s *Server) log() string { return filepath.Join(s.dir, "out.log") }

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
	exited := s.Exited()
	if exited == nil {
		return ErrNotRunning
	}
	deadline := time.Now().Add(timeout)
	for {
		mode, err := s.Mode()
		if err == nil && mode != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: %s not serving after %v (mode %q, %v)\n%s", s.Addr(), timeout, mode, err, proctest.LogTail(s.log()))
		}
		select {
		case <-exited:
			return fmt.Errorf("zktest: %s exited: %s\n%s", s.Addr(), s.State(), proctest.LogTail(s.log()))
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

// Mntr asks the server at addr for its statistics ("mntr"), by name. The
// server counts the question as a packet received.
func Mntr(addr string) (map[string]string, error) {
	out, err := FourLetter(addr, "mntr")
	if err != nil {
		return nil, err
	}
	return parseMntr(out), nil
}

// parseMntr reads the reply to "mntr": one "name<TAB>value" a line.
func parseMntr(out string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
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
