package commands

import (
	"fmt"
	"strings"

	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/resp"
)

// The read-only data commands a lock library reads its own keys with
// (Redisson: HGET for getHoldCount and the read/write lock's mode, HEXISTS
// for isHeldByThread). On the redlock and embedded backends each runs as
// a fixed script through the path of scripts outside the catalog
// (runOnNodes): on every node, the client getting the reply a majority
// gave, or NOQUORUM when no majority agrees. The zookeeper backend has no
// such keys and refuses them with an error naming the redlock backend.

// readCommands are the commands, lower-cased, with Redis 7.0's arity
// (command name included; negative: at least). The node checks the rest
// of the syntax, as Redis would, and its error is the reply.
var readCommands = map[string]int{
	"hget": 3, "hexists": 3, "hgetall": 2, "hlen": 2, "hkeys": 2, "hvals": 2, "hmget": -3, "hstrlen": 3,
	"lrange": 4, "lindex": 3,
	"zrange": -4, "zscore": 3, "zrank": -3, "zrevrank": -3, "zcard": 2, "zcount": 4, "zmscore": -3,
	"scard": 2, "sismember": 3, "smembers": 2, "smismember": -3,
	"strlen": 2, "getrange": 4,
}

// readScript is the script that runs name on the nodes: pcall, so that a
// node's error (WRONGTYPE, a syntax error) reads as Redis's own, without a
// script suffix.
func readScript(name string) string {
	return "return redis.pcall('" + name + "', KEYS[1], unpack(ARGV))"
}

// registerReads admits each command's script once and registers the
// commands.
func (h *Handler) registerReads(t *resp.Table) error {
	for name, arity := range readCommands {
		s, err := luascript.Admit([]byte(readScript(name)))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := t.Add(resp.Command{Name: name, Arity: arity, Handler: h.read(name, s), Class: resp.Legacy, Keys: resp.FirstKey}); err != nil {
			return err
		}
	}
	return nil
}

// read serves name key [arg ...] by running s on the nodes with KEYS =
// [key] and ARGV = the other arguments.
func (h *Handler) read(name string, s *luascript.Admitted) func(c *resp.Conn, args [][]byte) {
	return func(c *resp.Conn, args [][]byte) {
		if h.run.Runner == nil {
			c.Error("ERR " + strings.ToUpper(name) + " reads keys that only the redlock backend's nodes hold (backend = \"redlock\" or \"embedded\"); " +
				"this instance uses the " + h.run.Backend + " backend")
			return
		}
		if err := h.runOnNodes(c, s, args[1:2], args[2:]); err != nil {
			c.Error(replyError("", err))
		}
	}
}
