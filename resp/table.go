package resp

import (
	"fmt"
	"sort"
	"strings"
)

// Flags qualify a command.
type Flags uint8

const (
	// NoAuth commands run before the client authenticated.
	NoAuth Flags = 1 << iota
	// NoMulti commands cannot join a transaction (they block or change how
	// the connection is served): queued, they are refused and EXEC aborts.
	NoMulti
)

// Command is one entry of the command table.
type Command struct {
	Name string // lower case
	// Arity counts the arguments with the command name, as Redis does: a
	// positive arity is exact, a negative one is a minimum.
	Arity   int
	Flags   Flags
	Handler func(c *Conn, args [][]byte)
	// Class decides which users may run the command (default Connection:
	// all of them).
	Class Class
	// Keys returns the keys among args (arity already checked), which a
	// user's key patterns must match; nil: the command touches no key.
	Keys func(args [][]byte) [][]byte
	// Info is the command's COMMAND INFO entry; nil: Redis's entry for the
	// name, if Redis has the command (commandinfo.go).
	Info *CommandInfo
	// Waits says which limit a call that may block counts against (a
	// restricted user's share of it, acl.go); nil: it never blocks.
	Waits func(args [][]byte) Waits
}

// Table maps command names to commands.
type Table struct {
	cmds map[string]*Command
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{cmds: map[string]*Command{}} }

// Add registers cmds; a name registered twice is an error.
func (t *Table) Add(cmds ...Command) error {
	for _, c := range cmds {
		name := strings.ToLower(c.Name)
		if _, dup := t.cmds[name]; dup {
			return fmt.Errorf("command %q registered twice", name)
		}
		if len(name) > 24 {
			return fmt.Errorf("command %q: names are at most 24 bytes", name)
		}
		if c.Arity == 0 || c.Handler == nil {
			return fmt.Errorf("command %q needs an arity and a handler", name)
		}
		c.Name = name
		if err := checkInfo(&c); err != nil {
			return err
		}
		t.cmds[name] = &c
	}
	return nil
}

// Len is the number of commands.
func (t *Table) Len() int { return len(t.cmds) }

// Unlisted names the commands that have no COMMAND INFO entry, apart from
// the answers to HTTP requests, which Redis does not list either.
func (t *Table) Unlisted() []string {
	var out []string
	for name, c := range t.cmds {
		if c.Info == nil && !unlisted[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// lookup finds the command named by name in any letter case, without
// allocating or changing name (errors quote it as the client sent it).
func (t *Table) lookup(name []byte) *Command {
	var buf [24]byte // longer than any command name
	if len(name) > len(buf) {
		return nil
	}
	for i, b := range name {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		buf[i] = b
	}
	return t.cmds[string(buf[:len(name)])]
}

// arityOK reports whether n arguments (name included) fit the command.
func (c *Command) arityOK(n int) bool {
	if c.Arity > 0 {
		return n == c.Arity
	}
	return n >= -c.Arity
}
