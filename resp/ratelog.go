package resp

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// rateLog lets a repeated event log at most one line per interval, so that
// a client cannot fill the log (a flood of refused connections, say). The
// line it lets through says how many it held back since the last one.
type rateLog struct {
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	dropped int
}

// allow reports whether to log this event, and how many were not logged
// since the last that was.
func (r *rateLog) allow() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < r.every {
		r.dropped++
		return false, 0
	}
	dropped := r.dropped
	r.last, r.dropped = now, 0
	return true, dropped
}

// closedOnError logs a connection that ended on an error (a protocol
// error, a broken limit, a reset), a line per refusalLogEvery at most:
// every client can cause one, so a flood of them must not flood the log.
func (s *Server) closedOnError(c *Conn, err error) {
	if ok, dropped := s.closeLog.allow(); ok {
		s.log.Info("connection closed", zap.Uint64("client", c.id), zap.String("addr", c.RemoteAddr()), zap.Error(err),
			zap.Int("not_logged_since_last", dropped))
	}
}
