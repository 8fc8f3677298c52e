package zookeeper

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
)

// authTimeout bounds the wait for the ensemble to accept the digest.
const authTimeout = 10 * time.Second

// authenticate adds the digest identity before any other request (the
// session sends requests in order, and resends it after reconnecting).
func (z *ZooKeeper) authenticate() error {
	if z.opts.Digest == "" {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- z.conn.AddAuth("digest", []byte(z.opts.Digest)) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("zookeeper: digest authentication: %w", err)
		}
		return nil
	case <-time.After(authTimeout):
		return fmt.Errorf("zookeeper: digest authentication: no answer within %v", authTimeout)
	}
}

// event follows the session. It runs on go-zookeeper's connection loop and
// must not block or call ZooKeeper.
func (z *ZooKeeper) event(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		z.log.Info("ZooKeeper session established", zap.String("server", ev.Server))
	case zk.StateDisconnected:
		if !z.isClosed() {
			z.log.Warn("ZooKeeper connection lost: locks are kept while the session lasts; new ones are refused",
				zap.String("server", ev.Server))
		}
	case zk.StateExpired:
		z.sessionExpired()
	}
}

// sessionExpired reports every connection-bound lock held through the
// expired session as lost to the engine (Events.Lost) — ZooKeeper deleted
// its nodes. Its places in line are gone too. Leases are not: their nodes
// are persistent, and this instance still ends them when overdue.
func (z *ZooKeeper) sessionExpired() {
	lost := z.dropSession()
	z.log.Warn("ZooKeeper session expired; a new one is being established", zap.Int("locks_lost", len(lost)))
	if z.opts.Events == nil {
		return
	}
	for _, l := range lost {
		z.opts.Events.Lost(l.key, l.token)
	}
}

// dropSession forgets the nodes of the expired session, but for the
// leases' persistent nodes, and returns its connection-bound locks.
func (z *ZooKeeper) dropSession() []zkLock {
	z.mu.Lock()
	defer z.mu.Unlock()
	var lost []zkLock
	for p, n := range z.own {
		if n.held && n.persistent {
			continue
		}
		n.timer.Stop()
		delete(z.own, p)
		z.unindex(p, n)
		if n.held {
			lost = append(lost, zkLock{n.key, n.token})
		}
	}
	clear(z.places)
	clear(z.handed)
	return lost
}

// negotiated is the session timeout the ensemble granted, by session.
// The server may cap what Options.SessionTimeout asks for (between 2 and
// 20 of its ticks unless configured otherwise: 10s asked of a server with
// tickTime 200ms gives 4s), and a lock bound to the session is safe only
// for the timeout granted.
type negotiated struct {
	mu      sync.Mutex
	session int64
	timeout time.Duration
}

// of is the timeout granted to session, false if not known yet.
func (n *negotiated) of(session int64) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.timeout, session != 0 && n.session == session && n.timeout > 0
}

func (n *negotiated) set(session int64, timeout time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.session, n.timeout = session, timeout
}

// authenticatedLine is how go-zookeeper (v1.0.4, which exports neither the
// timeout nor an event carrying it) logs a session it established, with
// the negotiated timeout in ms, right after the session's state event.
const authenticatedLine = "authenticated: id=%d, timeout=%d"

// zkLogger sends go-zookeeper's log lines to zap at debug level; the
// backend logs what matters (session established, lost, expired). It
// reads the negotiated session timeout from the line that announces a
// session (the one place go-zookeeper says it), and logs it.
type zkLogger struct {
	log       *zap.Logger
	requested time.Duration
	granted   *negotiated // nil: not read
}

func (l zkLogger) Printf(format string, v ...any) {
	l.log.Debug("go-zookeeper: " + fmt.Sprintf(format, v...))
	if format != authenticatedLine || l.granted == nil || len(v) != 2 {
		return
	}
	var id, ms int64
	if _, err := fmt.Sscanf(fmt.Sprintf(format, v...), authenticatedLine, &id, &ms); err != nil {
		return
	}
	timeout := time.Duration(ms) * time.Millisecond
	l.granted.set(id, timeout)
	fields := []zap.Field{zap.Int64("session", id), zap.Duration("requested", l.requested), zap.Duration("negotiated", timeout)}
	if timeout < l.requested {
		l.log.Warn("ZooKeeper granted a shorter session timeout than asked (the server caps it at maxSessionTimeout, by default 20 ticks); connection-bound locks are reported valid for at most the negotiated timeout", fields...)
		return
	}
	l.log.Info("ZooKeeper session timeout negotiated", fields...)
}
