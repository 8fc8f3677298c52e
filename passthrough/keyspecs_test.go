package passthrough

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestKeySpecsAsRedis: keyspecs.json holds the key specs a real
// redis-server gives in COMMAND, for every command and subcommand.
// LOCKPROXY_UPDATE_KEYSPECS=1 rewrites it from the server.
func TestKeySpecsAsRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Start(t, redistest.Options{}).Addr(), Protocol: 2})
	defer c.Close()
	reply, err := c.Do(context.Background(), "COMMAND").Slice()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]keySpec{}
	for _, e := range reply {
		addCommand(t, got, e.([]any))
	}
	if os.Getenv("LOCKPROXY_UPDATE_KEYSPECS") != "" {
		writeKeySpecs(t, got)
		return
	}
	if !reflect.DeepEqual(got, keySpecs) {
		for name, specs := range got {
			if !reflect.DeepEqual(specs, keySpecs[name]) {
				t.Errorf("%s: Redis's key specs %+v, keyspecs.json's %+v", name, specs, keySpecs[name])
			}
		}
		t.Fatalf("keyspecs.json differs from Redis's COMMAND (%d commands there, %d here)", len(got), len(keySpecs))
	}
}

// addCommand adds a COMMAND entry and its subcommands' to m.
func addCommand(t *testing.T, m map[string][]keySpec, e []any) {
	specs := []keySpec{}
	for _, s := range e[8].([]any) {
		specs = append(specs, specOf(t, s.([]any)))
	}
	m[strings.ToLower(e[0].(string))] = specs
	for _, sub := range e[9].([]any) {
		addCommand(t, m, sub.([]any))
	}
}

// specOf reads one key spec of COMMAND's RESP2 reply (maps as flat arrays).
func specOf(t *testing.T, flat []any) keySpec {
	f := pairs(flat)
	var s keySpec
	for _, flag := range f["flags"].([]any) {
		s.NotKey = s.NotKey || flag == "not_key"
	}
	bs, fk := pairs(f["begin_search"].([]any)), pairs(f["find_keys"].([]any))
	s.Begin, s.Find = bs["type"].(string), fk["type"].(string)
	b, k := pairs(bs["spec"].([]any)), pairs(fk["spec"].([]any))
	s.Index, s.StartFrom, s.LastKey, s.KeyStep = num(b["index"]), num(b["startfrom"]), num(k["lastkey"]), num(k["keystep"])
	s.Limit, s.KeyNumIdx, s.FirstKey = num(k["limit"]), num(k["keynumidx"]), num(k["firstkey"])
	if kw, ok := b["keyword"].(string); ok {
		s.Keyword = kw
	}
	return s
}

func pairs(flat []any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(flat); i += 2 {
		m[flat[i].(string)] = flat[i+1]
	}
	return m
}

func num(v any) int {
	n, _ := v.(int64)
	return int(n)
}

// writeKeySpecs writes m to keyspecs.json, a command a line.
func writeKeySpecs(t *testing.T, m map[string][]keySpec) {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, n := range names {
		specs, _ := json.Marshal(m[n])
		name, _ := json.Marshal(n)
		b.Write(name)
		b.WriteString(": ")
		b.Write(specs)
		if i < len(names)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	if err := os.WriteFile("keyspecs.json", b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
