package resp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/resp"
	"github.com/redis/go-redis/v9"
)

var update = flag.Bool("update", false, "regenerate redis_commands.json from the redis-server on PATH")

// servedRedis are the Redis 7.0 commands lockproxy serves, with the
// subcommands of each that it serves (newerCommands adds those newer than
// 7.0).
var servedRedis = map[string][]string{
	"acl": {"whoami", "help"}, "auth": nil, "blpop": nil, "brpop": nil,
	"client":  {"id", "getname", "setname", "info", "list", "no-evict", "kill", "reply", "help"},
	"command": {"count", "docs", "info", "list", "getkeys"},
	"del":     nil, "echo": nil, "eval": nil, "evalsha": nil, "exists": nil, "expire": nil, "get": nil,
	"hello": nil, "info": nil, "llen": nil, "lpop": nil, "lpush": nil, "pexpire": nil, "ping": nil,
	"psubscribe": nil, "pttl": nil, "publish": nil, "punsubscribe": nil, "quit": nil, "readonly": nil,
	"reset": nil, "rpop": nil, "rpush": nil, "script": {"load", "exists", "flush", "help"}, "select": nil,
	"set": nil, "setnx": nil, "spublish": nil, "ssubscribe": nil, "subscribe": nil, "sunsubscribe": nil,
	"ttl": nil, "type": nil, "unlink": nil, "unsubscribe": nil, "wait": nil,
	"pubsub": {"channels", "numsub", "numpat", "shardchannels", "shardnumsub", "help"},
	"multi":  nil, "exec": nil, "discard": nil, "watch": nil, "unwatch": nil,
	"hget": nil, "hexists": nil, "hgetall": nil, "hlen": nil, "hkeys": nil, "hvals": nil, "hmget": nil, "hstrlen": nil,
	"lrange": nil, "lindex": nil, "zrange": nil, "zscore": nil, "zrank": nil, "zrevrank": nil, "zcard": nil,
	"zcount": nil, "zmscore": nil, "scard": nil, "sismember": nil, "smembers": nil, "smismember": nil,
	"strlen": nil, "getrange": nil,
}

// TestRedisCommandsJSON checks redis_commands.json against a real
// redis-server's COMMAND INFO and COMMAND DOCS; with -update it writes the
// file from them.
func TestRedisCommandsJSON(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2})
	t.Cleanup(func() { c.Close() })
	all := map[string]*resp.CommandInfo{}
	for name, subs := range servedRedis {
		in := fetchInfo(t, c, name)
		for _, s := range subs {
			if in.Subcommands == nil {
				in.Subcommands = map[string]*resp.CommandInfo{}
			}
			in.Subcommands[name+"|"+s] = fetchInfo(t, c, name+"|"+s)
		}
		all[name] = in
	}
	data, err := json.MarshalIndent(all, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, '\n')
	if *update {
		if err := os.WriteFile("redis_commands.json", data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile("redis_commands.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, data) {
		t.Fatalf("redis_commands.json differs from this redis-server's COMMAND INFO and DOCS: run go test ./resp -run TestRedisCommandsJSON -update")
	}
}

// fetchInfo reads name's entry and DOCS summary from Redis (RESP2).
func fetchInfo(t *testing.T, c *redis.Client, name string) *resp.CommandInfo {
	t.Helper()
	ctx := context.Background()
	v, err := c.Do(ctx, "COMMAND", "INFO", name).Slice()
	if err != nil || len(v) != 1 || v[0] == nil {
		t.Fatalf("COMMAND INFO %s: %v %v", name, v, err)
	}
	e := v[0].([]any)
	in := &resp.CommandInfo{Arity: int(e[1].(int64)), Flags: strs(e[2]), First: int(e[3].(int64)), Last: int(e[4].(int64)),
		Step: int(e[5].(int64)), ACL: strs(e[6]), Tips: strs(e[7])}
	for _, ks := range e[8].([]any) {
		in.KeySpecs = append(in.KeySpecs, keySpec(pairs(ks)))
	}
	d, err := c.Do(ctx, "COMMAND", "DOCS", name).Slice()
	if err != nil || len(d) != 2 {
		t.Fatalf("COMMAND DOCS %s: %v %v", name, d, err)
	}
	doc := pairs(d[1])
	in.Doc = resp.Doc{Summary: str(doc["summary"]), Since: str(doc["since"]), Group: str(doc["group"]), Complexity: str(doc["complexity"])}
	return in
}

func keySpec(m map[string]any) resp.KeySpec {
	ks := resp.KeySpec{Notes: str(m["notes"]), Flags: strs(m["flags"])}
	bs, fk := pairs(m["begin_search"]), pairs(m["find_keys"])
	bspec, fspec := pairs(bs["spec"]), pairs(fk["spec"])
	ks.BeginSearch = resp.BeginSearch{Type: str(bs["type"]), Index: num(bspec["index"]), Keyword: str(bspec["keyword"]), StartFrom: num(bspec["startfrom"])}
	ks.FindKeys = resp.FindKeys{Type: str(fk["type"]), LastKey: num(fspec["lastkey"]), KeyStep: num(fspec["keystep"]), Limit: num(fspec["limit"]),
		KeyNumIdx: num(fspec["keynumidx"]), FirstKey: num(fspec["firstkey"])}
	return ks
}

// pairs reads a RESP2 flat map.
func pairs(v any) map[string]any {
	m := map[string]any{}
	l, _ := v.([]any)
	for i := 0; i+1 < len(l); i += 2 {
		m[fmt.Sprint(l[i])] = l[i+1]
	}
	return m
}

func strs(v any) []string {
	out := []string{}
	for _, s := range v.([]any) {
		out = append(out, fmt.Sprint(s))
	}
	return out
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func num(v any) int {
	n, _ := v.(int64)
	return int(n)
}
