package commands

import (
	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/resp"
)

// maxTaken bounds the locks a connection remembers taking. Beyond it a
// lock is not remembered, and (with legacy.del_from_any_connection off)
// its DEL from this connection counts nothing; its lease still ends it.
const maxTaken = 1024

// connSession is the commands' state of one connection.
type connSession struct {
	owner *engine.Owner
	// taken maps keys this connection locked to their grants (token and
	// fence, so that a later grant with the same token is not taken for
	// this one), kept only when DEL is limited to the connection that took
	// the lock.
	taken      map[string]grantID
	trackTaken bool
	// watched are the lock keys WATCH read, by key (multi.go).
	watched map[string]watched
}

// grantID names one grant of a key: its token and its fencing token.
type grantID struct {
	token string
	fence int64
}

func session(c *resp.Conn) *connSession { return c.State.(*connSession) }

// owner is the engine's view of c.
func owner(c *resp.Conn) *engine.Owner { return session(c).owner }

// took remembers that the connection was granted key (g).
func (s *connSession) took(key string, g grantID) {
	if !s.trackTaken {
		return
	}
	if s.taken == nil {
		s.taken = map[string]grantID{}
	}
	if _, ok := s.taken[key]; ok || len(s.taken) < maxTaken {
		s.taken[key] = g
	}
}

// pushLockLost names the RESP3 push that tells a holder its lock on a key
// was lost or taken from it: >3 "locklost" key reason. A client that does
// not know it skips it (go-redis v9, redis-py 5+ read pushes apart from
// replies); a go-redis client listens with
// RegisterPushNotificationHandler("locklost", ...).
const pushLockLost = "locklost"

// lostHere answers -LOCKLOST, and reports true, when a lock this
// connection held on key was lost and it has not yet been told on a
// command: its next command about the key hears of it, once.
func (h *Handler) lostHere(c *resp.Conn, keys ...string) bool {
	for _, key := range keys {
		if err := owner(c).TakeLost(key); err != nil {
			c.Error(replyError(key, err))
			return true
		}
	}
	return false
}
