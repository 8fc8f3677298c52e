package resp

import (
	"net"

	"go.uber.org/zap"
)

// Protected mode, as Redis has it: while no password is set, a client that
// is not on the loopback interface gets this error as soon as it connects,
// and the connection is closed.
const msgDenied = "DENIED lockproxy is running in protected mode because protected mode is enabled and no password is set. " +
	"In this mode connections are only accepted from the loopback interface. " +
	"If you want to connect from external computers to lockproxy you may adopt one of the following solutions: " +
	"1) Set a password (password_file in the config file, the LOCKPROXY_PASSWORD environment variable or --password-file) and restart lockproxy. " +
	"2) Alternatively you can disable protected mode by setting protected_mode = false in the config file, or by starting lockproxy with --protected-mode=false, " +
	"however MAKE SURE lockproxy is not publicly accessible from internet if you do so. " +
	"NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside."

// denied reports whether protected mode refuses a client at addr.
func (s *Server) denied(addr string) bool {
	if !s.cfg.ProtectedMode || s.password() != "" {
		return false
	}
	isLocal := s.cfg.IsLocal
	if isLocal == nil {
		isLocal = IsLoopback
	}
	return !isLocal(addr)
}

// IsLoopback reports whether addr ("host:port") is on the loopback
// interface (127.0.0.0/8 or ::1).
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpCommands are the first words of an HTTP request that Redis treats as
// an attack (cross-protocol scripting: a web page making a browser POST
// commands to a Redis port). The connection is closed without a reply, so
// that nothing later in the request (its body) runs.
func (s *Server) httpCommands() []Command {
	return []Command{
		{Name: "post", Arity: -1, Flags: NoAuth, Handler: s.securityWarning},
		{Name: "host:", Arity: -1, Flags: NoAuth, Handler: s.securityWarning},
	}
}

func (s *Server) securityWarning(c *Conn, _ [][]byte) {
	if ok, dropped := s.attackLog.allow(); ok {
		s.log.Warn("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to lockproxy. "+
			"This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your lockproxy instance. Connection aborted.",
			zap.String("addr", c.RemoteAddr()), zap.Int("not_logged_since_last", dropped))
	}
	c.Close()
}
