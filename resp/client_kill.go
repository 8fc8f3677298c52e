package resp

import (
	"strconv"
	"strings"
)

// clientHelp answers CLIENT HELP as Redis does: one status line per line.
func clientHelp(c *Conn) {
	lines := []string{
		"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GETNAME",
		"    Return the name of the current connection.",
		"ID",
		"    Return the ID of the current connection.",
		"INFO",
		"    Return information about the current client connection.",
		"KILL <ip:port>",
		"    Kill connection made from <ip:port>.",
		"KILL <option> <value> [<option> <value> [...]]",
		"    Kill connections. Options are:",
		"    * ADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made from the specified address",
		"    * LADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made to specified local address",
		"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
		"      Kill connections by type.",
		"    * USER <username>",
		"      Kill connections authenticated by <username>.",
		"    * SKIPME (YES|NO)",
		"      Skip killing current connection (default: yes).",
		"    * ID <client-id>",
		"      Kill connections by client id.",
		"LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)]",
		"    Return information about client connections.",
		"REPLY (ON|OFF|SKIP)",
		"    Control the replies sent to the current connection.",
		"SETINFO <option> <value>",
		"    Set client meta attr. Options are:",
		"    * LIB-NAME: the client lib name.",
		"    * LIB-VER: the client lib version.",
		"SETNAME <name>",
		"    Assign the name <name> to the current connection.",
		"NO-EVICT (ON|OFF)",
		"    Accepted and ignored: lockproxy evicts no client.",
		"NO-TOUCH (ON|OFF)",
		"    Accepted and ignored.",
		"HELP",
		"    Print this help.",
	}
	c.Array(len(lines))
	for _, l := range lines {
		c.Simple(l)
	}
}

// killFilter is what CLIENT KILL matches; every set field must match.
type killFilter struct {
	addr, laddr string
	user        string // "" matches any user
	id          uint64
	noneMatch   bool // TYPE other than NORMAL: lockproxy has only normal clients
	skipMe      bool
}

// clientKill is CLIENT KILL ip:port (the old form, answering OK or an
// error) or CLIENT KILL <filter> <value> ... (answering the number of
// connections closed), as in Redis.
func (s *Server) clientKill(c *Conn, args [][]byte) {
	var f killFilter
	if len(args) == 3 {
		f.addr = string(args[2])
	} else if msg := s.parseKill(&f, args[2:]); msg != "" {
		c.Error(msg)
		return
	}
	killed, self := s.kill(c, f)
	switch {
	case len(args) == 3 && killed == 0:
		c.Error("ERR No such client")
	case len(args) == 3:
		c.OK()
	default:
		c.Int(int64(killed))
	}
	if self {
		c.Close() // after the reply, as Redis's CLOSE_AFTER_REPLY
	}
}

// parseKill reads the filter options; it returns an error text or "".
func (s *Server) parseKill(f *killFilter, opts [][]byte) string {
	f.skipMe = true
	if len(opts)%2 != 0 {
		return "ERR syntax error"
	}
	for i := 0; i < len(opts); i += 2 {
		val := string(opts[i+1])
		switch strings.ToUpper(string(opts[i])) {
		case "ID":
			id, err := strconv.ParseInt(val, 10, 64)
			if err != nil || id < 1 {
				return "ERR client-id should be greater than 0"
			}
			f.id = uint64(id)
		case "ADDR":
			f.addr = val
		case "LADDR":
			f.laddr = val
		case "TYPE":
			switch strings.ToLower(val) {
			case "normal":
			case "master", "replica", "slave", "pubsub":
				f.noneMatch = true
			default:
				return "ERR Unknown client type '" + clip(opts[i+1]) + "'"
			}
		case "USER":
			if val != "default" && s.user(val) == nil {
				return "ERR No such user '" + clip(opts[i+1]) + "'"
			}
			f.user = val
		case "SKIPME":
			switch strings.ToLower(val) {
			case "yes":
				f.skipMe = true
			case "no":
				f.skipMe = false
			default:
				return "ERR syntax error"
			}
		default:
			return "ERR syntax error"
		}
	}
	return ""
}

// kill closes the connections f matches that me may see (visible) and
// reports how many, and whether the caller's own connection is among them
// (it closes after its reply).
func (s *Server) kill(me *Conn, f killFilter) (killed int, self bool) {
	if f.noneMatch {
		return 0, false
	}
	s.mu.Lock()
	var victims []*Conn
	for _, c := range s.conns {
		if me.visible(c) && f.matches(c) && !(c == me && f.skipMe) {
			victims = append(victims, c)
		}
	}
	s.mu.Unlock()
	for _, c := range victims {
		if c == me {
			self = true
			continue
		}
		c.Drop()
	}
	return len(victims), self
}

// matches skips connections already closing: a second KILL of the same
// client finds no such client, as in Redis.
func (f killFilter) matches(c *Conn) bool {
	return !c.closing.Load() && (f.id == 0 || c.id == f.id) && (f.user == "" || c.userName() == f.user) &&
		(f.addr == "" || c.rc.RemoteAddr() == f.addr) &&
		(f.laddr == "" || c.rc.NetConn().LocalAddr().String() == f.laddr)
}
