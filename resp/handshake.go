package resp

import (
	"crypto/subtle"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The Redis version lockproxy reports: clients pick their features by it,
// and lockproxy answers the handshake of a Redis 7.2.
const redisVersion = "7.2.0"

// handshake returns the connection commands every Redis client sends.
func (s *Server) handshake() []Command {
	return []Command{
		{Name: "hello", Arity: -1, Flags: NoAuth, Handler: s.hello},
		{Name: "auth", Arity: -2, Flags: NoAuth, Handler: s.auth},
		{Name: "ping", Arity: -1, Handler: ping},
		{Name: "echo", Arity: 2, Handler: func(c *Conn, a [][]byte) { c.Bulk(a[1]) }},
		{Name: "select", Arity: 2, Handler: selectDB},
		{Name: "readonly", Arity: 1, Handler: func(c *Conn, _ [][]byte) { c.OK() }},
		{Name: "quit", Arity: -1, Flags: NoAuth, Handler: func(c *Conn, _ [][]byte) { c.OK(); c.Close() }},
		{Name: "reset", Arity: 1, Flags: NoAuth, Handler: s.reset},
		{Name: "client", Arity: -2, Handler: s.client},
		{Name: "command", Arity: -1, Handler: s.command},
		{Name: "info", Arity: -1, Handler: s.info},
		{Name: "acl", Arity: -2, Handler: s.acl},
	}
}

func ping(c *Conn, args [][]byte) {
	if len(args) <= 2 && c.Proto() == 2 && c.subscriptions() > 0 {
		subscribedPing(c, args)
		return
	}
	switch len(args) {
	case 1:
		c.Simple("PONG")
	case 2:
		c.Bulk(args[1])
	default:
		c.Error("ERR wrong number of arguments for 'ping' command")
	}
}

// selectDB is SELECT n: the connection's lock namespace from now on (see
// DBKey), for the databases a default Redis has.
func selectDB(c *Conn, args [][]byte) {
	n, err := strconv.Atoi(string(args[1]))
	switch {
	case err != nil:
		c.Error("ERR value is not an integer or out of range")
	case n < 0 || n >= Databases:
		c.Error("ERR DB index is out of range")
	default:
		c.mu.Lock()
		c.db = n
		c.mu.Unlock()
		c.OK()
	}
}

// checkAuth compares a client's credentials with the configured password.
// With none configured, the default user takes any password, as Redis's
// "nopass" default user does.
func (s *Server) checkAuth(user, pass string) bool {
	if user != "" && user != "default" {
		return s.checkUser(user, pass)
	}
	want := s.password()
	return want == "" || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
}

func (s *Server) auth(c *Conn, args [][]byte) {
	if len(args) > 3 {
		c.Error("ERR syntax error")
		return
	}
	if s.password() == "" && len(args) == 2 {
		c.Error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	user, pass := "", string(args[len(args)-1])
	if len(args) == 3 {
		user = string(args[1])
	}
	if !s.checkAuth(user, pass) {
		s.authFailed(c, user)
		return
	}
	c.mu.Lock()
	c.setAuthed(true)
	c.user = user
	c.mu.Unlock()
	c.OK()
}

// hello is HELLO [protover [AUTH username password] [SETNAME clientname]].
func (s *Server) hello(c *Conn, args [][]byte) {
	proto := c.Proto()
	if len(args) > 1 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil {
			c.Error("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.Error("NOPROTO unsupported protocol version")
			return
		}
		proto = v
	}
	var name, user *string
	authed := false
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch {
		case opt == "AUTH" && i+2 < len(args):
			if !s.checkAuth(string(args[i+1]), string(args[i+2])) {
				s.authFailed(c, string(args[i+1]))
				return
			}
			authed = true
			u := string(args[i+1])
			user = &u
			i += 2
		case opt == "SETNAME" && i+1 < len(args):
			n := string(args[i+1])
			if !validName(n) {
				c.Error(msgBadClientName)
				return
			}
			name = &n
			i++
		default:
			c.Error("ERR Syntax error in HELLO option '" + clip(args[i]) + "'")
			return
		}
	}
	c.mu.Lock()
	if !c.authed && !authed {
		c.mu.Unlock()
		c.Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	c.setAuthed(true)
	c.proto = proto
	if user != nil {
		c.user = *user
	}
	if name != nil {
		c.name = *name
	}
	c.mu.Unlock()
	c.Map(7)
	c.BulkString("server")
	c.BulkString("redis")
	c.BulkString("version")
	c.BulkString(redisVersion)
	c.BulkString("proto")
	c.Int(int64(proto))
	c.BulkString("id")
	c.Int(int64(c.id))
	c.BulkString("mode")
	c.BulkString("standalone")
	c.BulkString("role")
	c.BulkString("master")
	c.BulkString("modules")
	c.Array(0)
}

// validName is Redis's rule for client names: printable, no spaces.
func validName(n string) bool {
	for i := 0; i < len(n); i++ {
		if n[i] < '!' || n[i] > '~' {
			return false
		}
	}
	return true
}

func (s *Server) reset(c *Conn, _ [][]byte) {
	s.endTx(c)
	s.session.Reset(c)
	s.unsubscribeAll(c)
	c.mu.Lock()
	c.proto, c.db, c.name, c.libName, c.libVer = 2, 0, "", "", ""
	c.replyOff, c.skipNext, c.rc.quiet = false, false, false // +RESET is written, as by Redis
	c.setAuthed(s.password() == "")
	c.user = ""
	c.mu.Unlock()
	c.Simple("RESET")
}

// client is CLIENT SETNAME|GETNAME|ID|SETINFO|INFO|LIST|NO-EVICT|NO-TOUCH|KILL|REPLY|HELP.
func (s *Server) client(c *Conn, args [][]byte) {
	sub := strings.ToUpper(string(args[1]))
	switch {
	case sub == "ID" && len(args) == 2:
		c.Int(int64(c.id))
	case sub == "GETNAME" && len(args) == 2:
		if n := c.Name(); n != "" {
			c.BulkString(n)
		} else {
			c.Null()
		}
	case sub == "SETNAME" && len(args) == 3:
		n := string(args[2])
		if !validName(n) {
			c.Error(msgBadClientName)
			return
		}
		c.mu.Lock()
		c.name = n
		c.mu.Unlock()
		c.OK()
	case sub == "SETINFO" && len(args) == 4:
		s.setInfo(c, strings.ToUpper(string(args[2])), string(args[3]))
	case sub == "INFO" && len(args) == 2:
		c.BulkString(c.describe() + "\n")
	case sub == "LIST":
		c.BulkString(s.clientList(c))
	case (sub == "NO-EVICT" || sub == "NO-TOUCH") && len(args) == 3:
		c.OK()
	case sub == "REPLY":
		c.clientReply(args)
	case sub == "KILL" && len(args) >= 3:
		s.clientKill(c, args)
	case sub == "HELP" && len(args) == 2:
		clientHelp(c)
	default:
		c.Error("ERR unknown subcommand or wrong number of arguments for '" + clip(args[1]) + "'. Try CLIENT HELP.")
	}
}

func (s *Server) setInfo(c *Conn, attr, val string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch attr {
	case "LIB-NAME":
		c.libName = val
	case "LIB-VER":
		c.libVer = val
	default:
		c.Error("ERR Unrecognized option '" + attr + "'")
		return
	}
	c.OK()
}

// describe is the connection's line in CLIENT LIST.
func (c *Conn) describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("id=%d addr=%s name=%s age=%d db=%d resp=%d lib-name=%s lib-ver=%s cmd=%s",
		c.id, c.rc.RemoteAddr(), c.name, int(time.Since(c.created).Seconds()), c.db, c.proto, c.libName, c.libVer, c.lastCmd)
}

// clientList is CLIENT LIST as me may see it: every connection for the
// default user, a restricted user's own connections only (visible).
func (s *Server) clientList(me *Conn) string {
	s.mu.Lock()
	conns := make([]*Conn, 0, len(s.conns))
	for _, c := range s.conns {
		if me.visible(c) {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].id < conns[j].id })
	var b strings.Builder
	for _, c := range conns {
		b.WriteString(c.describe())
		b.WriteByte('\n')
	}
	return b.String()
}

// info is INFO [section ...]: lockproxy's server and clients sections
// followed by the Session's.
func (s *Server) info(c *Conn, args [][]byte) {
	section := "default"
	if len(args) > 1 {
		section = strings.ToLower(string(args[1]))
	}
	var b strings.Builder
	if wants(section, "server") {
		fmt.Fprintf(&b, "# Server\r\nredis_version:%s\r\nlockproxy_version:%s\r\nredis_mode:standalone\r\nprocess_id:%d\r\nuptime_in_seconds:%d\r\n\r\n",
			redisVersion, s.cfg.Version, os.Getpid(), int(time.Since(s.started).Seconds()))
	}
	if wants(section, "clients") {
		fmt.Fprintf(&b, "# Clients\r\nconnected_clients:%d\r\nmaxclients:%d\r\n\r\n", s.Clients(), s.maxClients.Load())
	}
	if wants(section, "stats") {
		// Redis 7.2's name for the count of failed AUTH and HELLO AUTH.
		fmt.Fprintf(&b, "# Stats\r\nacl_access_denied_auth:%d\r\n\r\n", s.AuthFailures())
	}
	b.WriteString(s.session.Info(section))
	out := b.String()
	if c.restricted() {
		out = withoutDeployment(out)
	}
	c.BulkString(strings.TrimSuffix(out, "\r\n"))
}

// wants reports whether INFO section asked for includes name.
func wants(asked, name string) bool {
	return asked == name || asked == "default" || asked == "all" || asked == "everything"
}

// Wants is exported for the Session's Info: whether asked includes name.
func Wants(asked, name string) bool { return wants(asked, name) }
