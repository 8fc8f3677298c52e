package zookeeper

import (
	"fmt"
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

// sessionExpired reports every lock held through the expired session as
// lost to the engine (Events.Lost) — ZooKeeper deleted its nodes. Its
// places in line are gone too.
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

// dropSession forgets the nodes of the expired session and returns its
// locks.
func (z *ZooKeeper) dropSession() []zkLock {
	z.mu.Lock()
	defer z.mu.Unlock()
	var lost []zkLock
	for _, n := range z.own {
		n.timer.Stop()
		if n.held {
			lost = append(lost, zkLock{n.key, n.token})
		}
	}
	clear(z.own)
	clear(z.locks)
	clear(z.places)
	clear(z.handed)
	return lost
}

// zkLogger sends go-zookeeper's log lines to zap at debug level; the
// backend logs what matters (session established, lost, expired).
type zkLogger struct{ log *zap.Logger }

func (l zkLogger) Printf(format string, v ...any) {
	l.log.Debug("go-zookeeper: " + fmt.Sprintf(format, v...))
}
