package resp

// newerCommands are the entries of commands and subcommands lockproxy
// serves that Redis 7.0 has not: as Redis 7.2 (WAITAOF, CLIENT SETINFO,
// CLIENT NO-TOUCH), Redis 8.4 (DELEX) and Valkey 9 (DELIFEQ) define them.
// A "container|sub" name is a subcommand of container.
var newerCommands = map[string]*CommandInfo{
	"waitaof": {Arity: 4, Flags: []string{"noscript"}, ACL: []string{"@slow", "@connection"},
		Tips: []string{"request_policy:all_shards", "response_policy:agg_min"},
		Doc:  Doc{Summary: "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.", Since: "7.2.0", Group: "generic", Complexity: "O(1)"}},
	"client|setinfo": {Arity: 4, Flags: []string{"noscript", "loading", "stale"}, ACL: []string{"@slow", "@connection"},
		Tips: []string{"request_policy:all_nodes", "response_policy:all_succeeded"},
		Doc:  Doc{Summary: "Sets information specific to the client or connection.", Since: "7.2.0", Group: "connection", Complexity: "O(1)"}},
	"client|no-touch": {Arity: 3, Flags: []string{"noscript", "loading", "stale"}, ACL: []string{"@slow", "@connection"},
		Doc: Doc{Summary: "Controls whether commands sent by the client affect the LRU/LFU of accessed keys.", Since: "7.2.0", Group: "connection", Complexity: "O(1)"}},
	"delex": {Arity: -2, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, ACL: []string{"@write", "@string", "@fast"},
		KeySpecs: FirstKeySpec("RW", "ACCESS", "DELETE"),
		Doc:      Doc{Summary: "Conditionally removes the specified key based on value or digest comparison.", Since: "8.4.0", Group: "string", Complexity: "O(1)"}},
	"delifeq": {Arity: 3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, ACL: []string{"@write", "@string", "@fast"},
		KeySpecs: FirstKeySpec("RW", "ACCESS", "DELETE"),
		Doc:      Doc{Summary: "Delete key if value matches string.", Since: "9.0.0", Group: "string", Complexity: "O(1)"}},
}
