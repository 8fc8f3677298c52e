package resp

import (
	"strings"
)

// command is COMMAND [COUNT | INFO [name ...] | DOCS [name ...] | LIST |
// GETKEYS command arg ...], as Redis 7 answers them, from the table's
// entries (commandinfo.go): COUNT, LIST and COMMAND count the same
// commands.
func (s *Server) command(c *Conn, args [][]byte) {
	if len(args) == 1 {
		s.commandInfo(c, nil)
		return
	}
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "count" && len(args) == 2:
		c.Int(int64(len(s.table.listed())))
	case sub == "list" && len(args) == 2:
		listed := s.table.listed()
		c.Array(len(listed))
		for _, cmd := range listed {
			c.BulkString(cmd.Name)
		}
	case sub == "list":
		c.Error("ERR syntax error")
	case sub == "info":
		s.commandInfo(c, args[2:])
	case sub == "docs":
		s.commandDocs(c, args[2:])
	case sub == "getkeys" && len(args) >= 4:
		s.getKeys(c, args[2:])
	case sub == "count" || sub == "getkeys":
		c.Error("ERR wrong number of arguments for 'command|" + sub + "' command")
	default:
		c.Error("ERR unknown subcommand '" + clip(args[1]) + "'. Try COMMAND HELP.")
	}
}

// commandInfo writes the entries of names (nil for an unknown one), or of
// every listed command when names is empty.
func (s *Server) commandInfo(c *Conn, names [][]byte) {
	if len(names) == 0 {
		listed := s.table.listed()
		c.Array(len(listed))
		for _, cmd := range listed {
			writeInfo(c, cmd.Name, cmd.Info)
		}
		return
	}
	c.Array(len(names))
	for _, n := range names {
		name, in := s.table.info(string(n))
		if in == nil {
			c.Null() // $-1, as Redis's addReplyNull
			continue
		}
		writeInfo(c, name, in)
	}
}

// info finds the entry of a command or of a "container|sub" subcommand,
// in any letter case.
func (t *Table) info(name string) (string, *CommandInfo) {
	name = strings.ToLower(name)
	container, _, isSub := strings.Cut(name, "|")
	cmd := t.cmds[container]
	switch {
	case cmd == nil || cmd.Info == nil:
		return "", nil
	case isSub:
		return name, cmd.Info.Subcommands[name]
	}
	return name, cmd.Info
}

// commandDocs writes a map from each known name (every listed command
// when names is empty) to its summary, since, group and complexity.
func (s *Server) commandDocs(c *Conn, names [][]byte) {
	type doc struct {
		name string
		in   *CommandInfo
	}
	var docs []doc
	if len(names) == 0 {
		for _, cmd := range s.table.listed() {
			docs = append(docs, doc{cmd.Name, cmd.Info})
		}
	}
	for _, n := range names {
		if name, in := s.table.info(string(n)); in != nil {
			docs = append(docs, doc{name, in})
		}
	}
	c.Map(len(docs))
	for _, d := range docs {
		c.BulkString(d.name)
		writeDoc(c, d.in.Doc)
	}
}

func writeDoc(c *Conn, d Doc) {
	n := 3
	if d.Complexity != "" {
		n++
	}
	c.Map(n)
	c.BulkString("summary")
	c.BulkString(d.Summary)
	c.BulkString("since")
	c.BulkString(d.Since)
	c.BulkString("group")
	c.BulkString(d.Group)
	if d.Complexity != "" {
		c.BulkString("complexity")
		c.BulkString(d.Complexity)
	}
}

// getKeys is COMMAND GETKEYS command arg ...: the keys the command would
// touch, found as the ACL check finds them (Command.Keys).
func (s *Server) getKeys(c *Conn, args [][]byte) {
	cmd := s.table.lookup(args[0])
	switch {
	case cmd == nil || cmd.Info == nil:
		c.Error("ERR Invalid command specified")
		return
	case !cmd.arityOK(len(args)):
		c.Error("ERR Invalid number of arguments specified for command")
		return
	}
	var keys [][]byte
	if cmd.Keys != nil {
		keys = cmd.Keys(args)
	}
	if len(keys) == 0 {
		c.Error("ERR The command has no key arguments")
		return
	}
	c.Array(len(keys))
	for _, k := range keys {
		c.Bulk(k)
	}
}
