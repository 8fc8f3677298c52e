package resp

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// CommandInfo is a command's COMMAND INFO entry, in Redis 7's shape, and
// the summary COMMAND DOCS gives. Clients read it to find a command's keys
// (go-redis's cluster client, redis-py): First, Last and Step, and the key
// specs, must say where the keys are.
type CommandInfo struct {
	Arity       int                     `json:"arity"`
	Flags       []string                `json:"flags"`
	First       int                     `json:"first"`
	Last        int                     `json:"last"`
	Step        int                     `json:"step"`
	ACL         []string                `json:"acl"`
	Tips        []string                `json:"tips"`
	KeySpecs    []KeySpec               `json:"key_specs"`
	Subcommands map[string]*CommandInfo `json:"subcommands,omitempty"` // by "container|sub"
	Doc         Doc                     `json:"doc"`
}

// KeySpec is one of a command's key specs (Redis 7).
type KeySpec struct {
	Notes       string      `json:"notes,omitempty"`
	Flags       []string    `json:"flags"`
	BeginSearch BeginSearch `json:"begin_search"`
	FindKeys    FindKeys    `json:"find_keys"`
}

// BeginSearch is where a key spec's search starts: Type "index" (Index),
// "keyword" (Keyword, StartFrom) or "unknown".
type BeginSearch struct {
	Type      string `json:"type"`
	Index     int    `json:"index,omitempty"`
	Keyword   string `json:"keyword,omitempty"`
	StartFrom int    `json:"startfrom,omitempty"`
}

// FindKeys is how a key spec finds its keys from there: Type "range"
// (LastKey, KeyStep, Limit), "keynum" (KeyNumIdx, FirstKey, KeyStep) or
// "unknown".
type FindKeys struct {
	Type      string `json:"type"`
	LastKey   int    `json:"lastkey,omitempty"`
	KeyStep   int    `json:"keystep,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	KeyNumIdx int    `json:"keynumidx,omitempty"`
	FirstKey  int    `json:"firstkey,omitempty"`
}

// Doc is what COMMAND DOCS gives of a command.
type Doc struct {
	Summary    string `json:"summary"`
	Since      string `json:"since"`
	Group      string `json:"group"`
	Complexity string `json:"complexity,omitempty"`
}

// FirstKeySpec is the key spec of a command whose only key is its first
// argument, with the key spec flags flags (RW, RO, ACCESS, UPDATE, ...).
func FirstKeySpec(flags ...string) []KeySpec {
	return []KeySpec{{Flags: flags, BeginSearch: BeginSearch{Type: "index", Index: 1}, FindKeys: FindKeys{Type: "range", KeyStep: 1}}}
}

// redisCommands.json holds Redis 7.0.15's COMMAND INFO entries and DOCS
// summaries of the Redis commands lockproxy serves, with only the
// subcommands it serves (TestCommandInfoMatchesRedis regenerates it with
// -update and checks it against a real redis-server); newerCommands adds
// the ones newer than 7.0.
//
//go:embed redis_commands.json
var redisCommandsJSON []byte

var redisCommands = func() map[string]*CommandInfo {
	m := map[string]*CommandInfo{}
	if err := json.Unmarshal(redisCommandsJSON, &m); err != nil {
		panic(fmt.Sprintf("resp: redis_commands.json: %v", err))
	}
	for name, info := range newerCommands {
		container, _, ok := strings.Cut(name, "|")
		switch {
		case !ok:
			m[name] = info
		case m[container] != nil:
			if m[container].Subcommands == nil {
				m[container].Subcommands = map[string]*CommandInfo{}
			}
			m[container].Subcommands[name] = info
		default:
			panic("resp: newerCommands: " + name + " has no container " + container)
		}
	}
	return m
}()

// RedisCommandInfo is Redis's entry for name (lower case), or nil.
func RedisCommandInfo(name string) *CommandInfo { return redisCommands[name] }

// unlisted are commands served but, as in Redis, not in COMMAND: the
// answers to HTTP requests.
var unlisted = map[string]bool{"post": true, "host:": true}

// checkInfo gives c Redis's entry when it has none, and checks that the
// entry agrees with the table's arity. A command with no entry is not
// listed (Table.Unlisted).
func checkInfo(c *Command) error {
	if unlisted[c.Name] {
		return nil
	}
	if c.Info == nil {
		c.Info = redisCommands[c.Name]
	}
	if c.Info != nil && c.Info.Arity != c.Arity {
		return fmt.Errorf("command %q: arity %d, COMMAND INFO says %d", c.Name, c.Arity, c.Info.Arity)
	}
	return nil
}

// listed are the table's commands that COMMAND lists, by name.
func (t *Table) listed() []*Command {
	out := make([]*Command, 0, len(t.cmds))
	for _, c := range t.cmds {
		if c.Info != nil {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// writeInfo writes name's COMMAND INFO entry: ten elements, as Redis 7
// writes them (flags, categories, tips and key specs are RESP3 sets).
func writeInfo(c *Conn, name string, in *CommandInfo) {
	c.Array(10)
	c.BulkString(name)
	c.Int(int64(in.Arity))
	writeSet(c, in.Flags, true)
	c.Int(int64(in.First))
	c.Int(int64(in.Last))
	c.Int(int64(in.Step))
	writeSet(c, in.ACL, true)
	writeSet(c, in.Tips, false)
	setHeader(c, len(in.KeySpecs))
	for _, ks := range in.KeySpecs {
		writeKeySpec(c, ks)
	}
	subs := sortedKeys(in.Subcommands)
	if len(subs) == 0 {
		setHeader(c, 0)
		return
	}
	c.Array(len(subs))
	for _, s := range subs {
		writeInfo(c, s, in.Subcommands[s])
	}
}

// setHeader starts a set of n elements: a RESP3 set, or an array in RESP2.
func setHeader(c *Conn, n int) {
	if c.Proto() == 3 {
		c.rc.WriteRaw([]byte("~" + strconv.Itoa(n) + "\r\n"))
		return
	}
	c.Array(n)
}

// writeSet writes items as a set of simple strings (status) or of bulk
// strings.
func writeSet(c *Conn, items []string, status bool) {
	setHeader(c, len(items))
	for _, it := range items {
		if status {
			c.Simple(it)
		} else {
			c.BulkString(it)
		}
	}
}

func writeKeySpec(c *Conn, ks KeySpec) {
	n := 3
	if ks.Notes != "" {
		n++
		c.Map(n)
		c.BulkString("notes")
		c.BulkString(ks.Notes)
	} else {
		c.Map(n)
	}
	c.BulkString("flags")
	writeSet(c, ks.Flags, true)
	c.BulkString("begin_search")
	c.Map(2)
	c.BulkString("type")
	c.BulkString(ks.BeginSearch.Type)
	c.BulkString("spec")
	switch b := ks.BeginSearch; b.Type {
	case "index":
		writePairs(c, "index", b.Index)
	case "keyword":
		c.Map(2)
		c.BulkString("keyword")
		c.BulkString(b.Keyword)
		c.BulkString("startfrom")
		c.Int(int64(b.StartFrom))
	default:
		c.Map(0)
	}
	c.BulkString("find_keys")
	c.Map(2)
	c.BulkString("type")
	c.BulkString(ks.FindKeys.Type)
	c.BulkString("spec")
	switch f := ks.FindKeys; f.Type {
	case "range":
		writePairs(c, "lastkey", f.LastKey, "keystep", f.KeyStep, "limit", f.Limit)
	case "keynum":
		writePairs(c, "keynumidx", f.KeyNumIdx, "firstkey", f.FirstKey, "keystep", f.KeyStep)
	default:
		c.Map(0)
	}
}

// writePairs writes a map of names to integers: name, value, name, value...
func writePairs(c *Conn, kv ...any) {
	c.Map(len(kv) / 2)
	for i := 0; i < len(kv); i += 2 {
		c.BulkString(kv[i].(string))
		c.Int(int64(kv[i+1].(int)))
	}
}

func sortedKeys(m map[string]*CommandInfo) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
