package commands

import (
	"errors"
	"fmt"
	"strconv"
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
	"zrange": -4, "zscore": 3, "zrank": 3, "zrevrank": 3, "zcard": 2, "zcount": 4, "zmscore": -3,
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
		r, err := h.evalOnNodes(c, s, args[1:2], args[2:])
		if err != nil {
			c.Error(replyError("", err))
			return
		}
		if c.Proto() == 3 {
			writeReply3(c, resp3Shape(name, args), r)
			return
		}
		writeReply(c, r)
	}
}

// shape is how Redis 7.0 replies a read command under RESP3 where a
// script (which speaks RESP2 to the node) gets a flat array or a string.
type shape int

const (
	asIs      shape = iota
	asMap           // HGETALL: a map of field → value
	asSet           // SMEMBERS: a set
	asDouble        // ZSCORE: a double (or null)
	asDoubles       // ZMSCORE: an array of doubles and nulls
	asPairs         // ZRANGE … WITHSCORES: an array of [member, double score]
)

// resp3Shape is the RESP3 shape of name's reply for args.
func resp3Shape(name string, args [][]byte) shape {
	switch name {
	case "hgetall":
		return asMap
	case "smembers":
		return asSet
	case "zscore":
		return asDouble
	case "zmscore":
		return asDoubles
	case "zrange":
		for _, a := range args[4:] {
			if strings.EqualFold(string(a), "withscores") {
				return asPairs
			}
		}
	}
	return asIs
}

// writeReply3 writes r in the RESP3 shape sh; a reply of another kind (an
// error, a null) is written as it is.
func writeReply3(c *resp.Conn, sh shape, r luascript.Reply) {
	switch {
	case sh == asMap && r.Kind == luascript.Array && len(r.Array)%2 == 0:
		c.Map(len(r.Array) / 2)
		for _, e := range r.Array {
			writeReply(c, e)
		}
	case sh == asSet && r.Kind == luascript.Array:
		c.Raw([]byte("~" + strconv.Itoa(len(r.Array)) + "\r\n"))
		for _, e := range r.Array {
			writeReply(c, e)
		}
	case sh == asDouble:
		writeDouble(c, r)
	case sh == asDoubles && r.Kind == luascript.Array:
		c.Array(len(r.Array))
		for _, e := range r.Array {
			writeDouble(c, e)
		}
	case sh == asPairs && r.Kind == luascript.Array && len(r.Array)%2 == 0:
		c.Array(len(r.Array) / 2)
		for i := 0; i < len(r.Array); i += 2 {
			c.Array(2)
			writeReply(c, r.Array[i])
			writeDouble(c, r.Array[i+1])
		}
	default:
		writeReply(c, r)
	}
}

// writeDouble writes a score the node formatted as Redis formats doubles
// (%.17g, or inf and -inf) as a RESP3 double, which Redis formats the same
// way; anything else as it is.
func writeDouble(c *resp.Conn, r luascript.Reply) {
	if r.Kind != luascript.Bulk || !isScore(r.Str) {
		writeReply(c, r)
		return
	}
	c.Raw([]byte("," + r.Str + "\r\n"))
}

// isScore reports whether s reads as a double (inf, -inf and nan included).
func isScore(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil || errors.Is(err, strconv.ErrRange)
}
