package resp

import (
	"crypto/subtle"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Class is the family of a command, for users' permissions.
type Class uint8

const (
	// Connection commands (handshake, PING, INFO, CLIENT, ...) run for
	// every user.
	Connection Class = iota
	// Native are lockproxy's own lock commands (LOCK, UNLOCK, ...).
	Native
	// Legacy are the Redis commands lock libraries use (SET NX, DEL, EVAL, ...).
	Legacy
)

// User is an identity a client takes with AUTH user pass or HELLO AUTH.
// The default user (the single password) may run every command on every
// key.
type User struct {
	Name     string
	Password string
	// Keys are the glob patterns (* and ?) of the keys the user may touch;
	// empty: none.
	Keys []string
	// Native and Legacy allow those classes of commands.
	Native, Legacy bool
}

// mayRun reports whether the user may run commands of class.
func (u *User) mayRun(class Class) bool {
	return class == Connection || class == Native && u.Native || class == Legacy && u.Legacy
}

// mayTouch reports whether key matches one of the user's patterns.
func (u *User) mayTouch(key []byte) bool {
	for _, p := range u.Keys {
		if glob(p, string(key)) {
			return true
		}
	}
	return false
}

// glob matches s against pattern, where * is any run of bytes and ? any
// one byte, as Redis's key patterns (without classes or escapes). It
// backtracks only to the last *, so a key costs at most
// len(pattern)*len(s) steps whatever the pattern.
func glob(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0 // the last * seen, and where s stood then
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p, i = p+1, i+1
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// SetUsers replaces the configured users; connections authenticated as a
// user get its new permissions with their next command, and lose every
// permission if it is gone.
func (s *Server) SetUsers(users []User) {
	m := make(map[string]*User, len(users))
	for i := range users {
		m[users[i].Name] = &users[i]
	}
	s.users.Store(&m)
}

// user is the configured user named name, or nil.
func (s *Server) user(name string) *User {
	if m := s.users.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// checkUser compares a named user's credentials.
func (s *Server) checkUser(name, pass string) bool {
	u := s.user(name)
	return u != nil && subtle.ConstantTimeCompare([]byte(pass), []byte(u.Password)) == 1
}

// MayTouch reports whether c's user may touch key: always for the default
// user, else when key matches one of the user's patterns. Commands that
// list keys (LOCKPROXY LOCKS) show a user only these.
func (c *Conn) MayTouch(key string) bool {
	c.mu.Lock()
	name := c.user
	c.mu.Unlock()
	if name == "" || name == "default" {
		return true
	}
	u := c.srv.user(name)
	return u != nil && u.mayTouch([]byte(key))
}

// MayTouchFrom reports whether c's user may touch every key that begins
// with prefix (a script that derives keys from it): always for the
// default user, else when a pattern ending in * matches prefix, since
// such a pattern then matches every extension of it.
func (c *Conn) MayTouchFrom(prefix string) bool {
	if !c.restricted() {
		return true
	}
	c.mu.Lock()
	name := c.user
	c.mu.Unlock()
	u := c.srv.user(name)
	if u == nil {
		return false
	}
	for _, p := range u.Keys {
		if strings.HasSuffix(p, "*") && glob(p, prefix) {
			return true
		}
	}
	return false
}

// Glob matches s against a Redis key pattern: * is any run of bytes and ?
// any one byte (no classes or escapes), as users' key patterns.
func Glob(pattern, s string) bool { return glob(pattern, s) }

// restricted reports whether c authenticated as an ACL user rather than
// the default user.
func (c *Conn) restricted() bool { return c.userName() != "default" }

// userName is the user c authenticated as, "default" for the default user.
func (c *Conn) userName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.user == "" {
		return "default"
	}
	return c.user
}

// visible reports whether c may see and kill other in CLIENT LIST and
// CLIENT KILL: the default user sees every connection, as Redis's admin
// does; a restricted user only its own user's, so that it can neither
// learn of other clients nor close one (and release its bound locks).
func (c *Conn) visible(other *Conn) bool {
	me := c.userName()
	return me == "default" || other.userName() == me
}

// adminOnly are the subcommands only the default user may run (as Redis's
// @admin and @dangerous): SCRIPT FLUSH empties the script cache that
// every user shares.
var adminOnly = map[string]bool{"script|flush": true}

// noPerm is the NOPERM error, in Redis's words, when the connection's user
// may not run def with args; "" when it may.
func (s *Server) noPerm(c *Conn, def *Command, args [][]byte) string {
	name := c.userName()
	if name == "default" {
		return ""
	}
	u := s.user(name)
	if u == nil || !u.mayRun(def.Class) {
		return "NOPERM User " + name + " has no permissions to run the '" + def.Name + "' command"
	}
	if len(args) > 1 {
		if sub := def.Name + "|" + strings.ToLower(string(args[1])); adminOnly[sub] {
			return "NOPERM User " + name + " has no permissions to run the '" + sub + "' command"
		}
	}
	if def.Keys == nil {
		return ""
	}
	for _, k := range def.Keys(args) {
		if !u.mayTouch(k) {
			return "NOPERM No permissions to access a key"
		}
	}
	return ""
}

// acl is ACL WHOAMI|HELP.
func (s *Server) acl(c *Conn, args [][]byte) {
	switch sub := strings.ToUpper(string(args[1])); {
	case sub == "WHOAMI" && len(args) == 2:
		c.mu.Lock()
		name := c.user
		c.mu.Unlock()
		if name == "" {
			name = "default"
		}
		c.BulkString(name)
	case sub == "HELP" && len(args) == 2:
		c.Array(2)
		c.Simple("WHOAMI")
		c.Simple("    Return the current connection username.")
	default:
		c.Error("ERR unknown subcommand or wrong number of arguments for '" + clip(args[1]) + "'. Try ACL HELP.")
	}
}

// FirstKey is the key position of commands whose key is their first
// argument.
func FirstKey(args [][]byte) [][]byte { return args[1:2] }

// AllKeys is the key position of commands whose every argument is a key.
func AllKeys(args [][]byte) [][]byte { return args[1:] }

// deploymentSections are the INFO sections that describe the deployment
// (the nodes' and the data Redis's addresses): with them and nodes without
// a password, a client could go around lockproxy. Only the default user
// sees them.
var deploymentSections = []string{"# Nodes\r\n", "# Passthrough\r\n"}

// withoutDeployment is INFO's text less the deployment sections.
func withoutDeployment(info string) string {
	parts := strings.SplitAfter(info, "\r\n\r\n")
	kept := parts[:0]
	for _, p := range parts {
		if !slices.ContainsFunc(deploymentSections, func(h string) bool { return strings.HasPrefix(p, h) }) {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "")
}

// Waits is the limit a blocking call counts against.
type Waits uint8

const (
	// NoWait: this call does not block.
	NoWait Waits = iota
	// LockWaiter counts against limits.max_waiters (LOCK ... WAIT).
	LockWaiter
	// BlockedClient counts against limits.max_blocked_clients (BLPOP, BRPOP).
	BlockedClient
)

// shares bounds the blocking calls of each restricted user to its share of
// the instance's limits, so that one user cannot take every waiter or
// blocked-client slot and refuse everyone else: with n users configured,
// a user's share of a limit is limit/(n+1). The default user is bounded
// by the limits themselves only.
type shares struct {
	limits [3]atomic.Int64 // by Waits: the instance's limits (SetWaitLimits)

	mu      sync.Mutex
	running map[shareKey]int
}

type shareKey struct {
	user string
	kind Waits
}

// SetWaitLimits tells the server the instance's max_waiters and
// max_blocked_clients, of which each restricted user gets a share.
func (s *Server) SetWaitLimits(maxWaiters, maxBlocked int) {
	s.shares.limits[LockWaiter].Store(int64(maxWaiters))
	s.shares.limits[BlockedClient].Store(int64(maxBlocked))
}

// share is a restricted user's share of the limit of kind; -1 when no
// limit is known.
func (s *Server) share(kind Waits) int {
	limit := s.shares.limits[kind].Load()
	if limit <= 0 {
		return -1
	}
	users := 0
	if m := s.users.Load(); m != nil {
		users = len(*m)
	}
	return int(limit) / (users + 1)
}

// takeShare counts a restricted user's call of def that may block against
// the user's share. It returns the function that gives the place back
// (when the call returns), or the error for a user whose share is taken.
func (s *Server) takeShare(c *Conn, def *Command, args [][]byte) (release func(), msg string) {
	release = func() {}
	if def.Waits == nil || !c.restricted() {
		return release, ""
	}
	kind := def.Waits(args)
	share := s.share(kind)
	if kind == NoWait || share < 0 {
		return release, ""
	}
	k := shareKey{c.userName(), kind}
	sh := &s.shares
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.running[k] >= share {
		return release, shareMsg[kind]
	}
	if sh.running == nil {
		sh.running = map[shareKey]int{}
	}
	sh.running[k]++
	return func() {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if sh.running[k]--; sh.running[k] == 0 {
			delete(sh.running, k)
		}
	}, ""
}

var shareMsg = [3]string{
	LockWaiter:    "ERR max number of waiters reached for this user (its share of limits.max_waiters)",
	BlockedClient: "ERR max number of blocked clients reached for this user (its share of limits.max_blocked_clients)",
}
