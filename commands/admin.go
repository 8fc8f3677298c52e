package commands

import (
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/resp"
)

// defaultListCount is how many entries LOCKPROXY LOCKS and WAITERS return
// without COUNT: each lock listed costs a read from the store.
const defaultListCount = 100

var lockproxyHelp = []string{
	"LOCKPROXY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"LOCKS [MATCH <pattern>] [COUNT <count>]",
	"    Locks granted through this instance, or that its clients wait for, by key:",
	"    key, mode, binding, validity_ms, fence, client_id, holder, waiters, held_here.",
	"    Tokens are never shown. COUNT defaults to 100.",
	"WAITERS [MATCH <pattern>] [COUNT <count>]",
	"    Clients of this instance waiting for a lock: key, client_id, waited_ms.",
	"HELP",
	"    Print this help.",
}

func (h *Handler) registerAdmin(t *resp.Table) error {
	return t.Add(resp.Command{Name: "lockproxy", Arity: -2, Handler: h.lockproxy, Class: resp.Native, Info: lockproxyInfo})
}

// lockproxy is LOCKPROXY LOCKS|WAITERS|HELP. A user limited to key
// patterns sees only the keys that match them.
func (h *Handler) lockproxy(c *resp.Conn, args [][]byte) {
	sub := strings.ToUpper(string(args[1]))
	switch {
	case sub == "HELP" && len(args) == 2:
		c.Array(len(lockproxyHelp))
		for _, l := range lockproxyHelp {
			c.Simple(l)
		}
	case sub == "LOCKS" || sub == "WAITERS":
		match, count, err := parseListArgs(args[2:])
		if err != "" {
			c.Error(err)
			return
		}
		visible := func(key string) bool { return (match == "" || resp.Glob(match, key)) && c.MayTouch(key) }
		if sub == "WAITERS" {
			writeWaiters(c, h.engine.WaitingList(visible, count))
			return
		}
		locks, lerr := h.engine.Locks(c.Context(), visible, count)
		if lerr != nil {
			c.Error(replyError("", lerr))
			return
		}
		writeLocks(c, locks)
	default:
		c.Error("ERR unknown subcommand or wrong number of arguments for '" + clipArg(args[1]) + "'. Try LOCKPROXY HELP.")
	}
}

// parseListArgs reads [MATCH pattern] [COUNT count], in any order.
func parseListArgs(args [][]byte) (match string, count int, errMsg string) {
	count = defaultListCount
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return "", 0, "ERR syntax error"
		}
		switch strings.ToUpper(string(args[i])) {
		case "MATCH":
			match = string(args[i+1])
		case "COUNT":
			n, err := strconv.Atoi(string(args[i+1]))
			if err != nil || n < 1 {
				return "", 0, "ERR value is out of range, must be positive"
			}
			count = n
		default:
			return "", 0, "ERR syntax error"
		}
	}
	return match, count, ""
}

func writeLocks(c *resp.Conn, locks []engine.Listed) {
	c.Array(len(locks))
	for _, l := range locks {
		c.Map(9)
		c.BulkString("key")
		c.BulkString(l.Key)
		c.BulkString("mode")
		c.BulkString("exclusive") // every lock the engine grants is
		c.BulkString("binding")
		c.BulkString(string(l.Mode))
		c.BulkString("validity_ms")
		c.Int(l.Validity.Milliseconds())
		c.BulkString("fence")
		c.Int(l.Fence)
		c.BulkString("client_id")
		if l.Client != 0 {
			c.Int(int64(l.Client))
		} else {
			c.Null()
		}
		c.BulkString("holder")
		c.BulkString(l.Name)
		c.BulkString("waiters")
		c.Int(int64(l.Waiters))
		c.BulkString("held_here")
		c.Int(boolInt(l.HeldHere))
	}
}

func writeWaiters(c *resp.Conn, ws []engine.ListedWaiter) {
	c.Array(len(ws))
	for _, w := range ws {
		c.Map(3)
		c.BulkString("key")
		c.BulkString(w.Key)
		c.BulkString("client_id")
		c.Int(int64(w.Client))
		c.BulkString("waited_ms")
		c.Int(w.Waited.Milliseconds())
	}
}

// clipArg shortens a client's argument for an error message.
func clipArg(b []byte) string {
	if len(b) > 128 {
		b = b[:128]
	}
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(string(b))
}
