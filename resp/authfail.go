package resp

import (
	"go.uber.org/zap"
)

// maxAuthFailures is how many wrong passwords (AUTH or HELLO AUTH) one
// connection may send: the last one is answered, then the connection is
// closed, so that a guesser pays a new connection (counted against
// max_clients, and the authentication timeout) every few guesses instead
// of guessing at the speed of a pipeline.
const maxAuthFailures = 10

// authFailed counts and logs (rate-limited) a wrong password, and closes c
// once it has sent maxAuthFailures of them. user is the name tried, "" for
// the default user.
func (s *Server) authFailed(c *Conn, user string) {
	s.authFailures.Add(1)
	c.authFails++
	if ok, dropped := s.authLog.allow(); ok {
		if user == "" {
			user = "default"
		}
		s.log.Warn("authentication failed", zap.String("addr", c.RemoteAddr()), zap.String("user", user),
			zap.Int("failures_on_connection", c.authFails), zap.Int("not_logged_since_last", dropped))
	}
	c.Error(msgWrongPass)
	if c.authFails >= maxAuthFailures {
		c.Close() // after the reply, as CLIENT KILL of itself
	}
}

// AuthFailures counts the wrong passwords clients sent (AUTH, HELLO AUTH)
// since the server started.
func (s *Server) AuthFailures() int64 { return s.authFailures.Load() }
