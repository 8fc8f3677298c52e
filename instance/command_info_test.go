package instance_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// COMMAND (issue 28 §4). On the old main COMMAND COUNT said 76 while
// COMMAND and COMMAND INFO SET were empty.

// rawReply reads one whole RESP2/RESP3 reply and returns its bytes as sent.
func rawReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil || len(line) < 3 {
		return line, fmt.Errorf("reply line %q: %v", line, err)
	}
	out := line
	n, _ := strconv.Atoi(strings.TrimSuffix(line[1:], "\r\n"))
	switch line[0] {
	case '$':
		if n >= 0 {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(rd, buf); err != nil {
				return "", err
			}
			out += string(buf)
		}
	case '*', '~', '>', '%':
		if line[0] == '%' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			el, err := rawReply(rd)
			if err != nil {
				return "", err
			}
			out += el
		}
	}
	return out, nil
}

// rawDo sends args and returns the reply's bytes.
func (r *rawConn) rawDo(args ...string) string {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	r.send(b.String())
	s, err := rawReply(r.rd)
	if err != nil {
		r.t.Fatalf("%v: %v", args, err)
	}
	return s
}

// commandList is COMMAND LIST's names.
func commandList(t *testing.T, r *rawConn) []string {
	t.Helper()
	reply := r.do("COMMAND", "LIST")
	names := strings.Fields(strings.Trim(reply, "[]"))
	if len(names) == 0 {
		t.Fatalf("COMMAND LIST: %q", reply)
	}
	return names
}

// TestCommandInfoMatchesRedis: COMMAND, COMMAND COUNT and COMMAND LIST
// agree; every command lockproxy serves that Redis 7.0 has gets exactly
// Redis's COMMAND INFO entry, byte for byte, in RESP2 and RESP3 (for a
// container, each subcommand lockproxy serves); lockproxy's own commands
// give their key at position 1.
func TestCommandInfoMatchesRedis(t *testing.T) {
	plain := redistest.Start(t, redistest.Options{})
	in := startInstance(t, embeddedConfig())
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			lp, rd := dialProto(t, in.Addr(), proto), dialProto(t, plain.Addr(), proto)
			names := commandList(t, lp)
			if got := lp.do("COMMAND", "COUNT"); got != ":"+strconv.Itoa(len(names)) {
				t.Fatalf("COMMAND COUNT %s, COMMAND LIST has %d", got, len(names))
			}
			if all := lp.rawDo("COMMAND"); !strings.HasPrefix(all, "*"+strconv.Itoa(len(names))+"\r\n") {
				t.Fatalf("COMMAND has not %d entries: %.40q", len(names), all)
			}
			compared := 0
			for _, name := range names {
				want := rd.rawDo("COMMAND", "INFO", name)
				if want == "*1\r\n$-1\r\n" || want == "*1\r\n_\r\n" { // not a Redis 7.0 command
					checkOwnEntry(t, lp, name)
					continue
				}
				for _, full := range entriesToCompare(t, lp, name) {
					want, got := rd.rawDo("COMMAND", "INFO", full), lp.rawDo("COMMAND", "INFO", full)
					if want == "*1\r\n$-1\r\n" || want == "*1\r\n_\r\n" {
						continue // a subcommand newer than 7.0
					}
					if got != want {
						t.Errorf("COMMAND INFO %s:\n got %q\nwant %q", full, got, want)
					}
					compared++
				}
			}
			if compared < 60 {
				t.Fatalf("compared only %d entries with Redis's", compared)
			}
			if got := lp.do("COMMAND", "INFO", "nosuchcommand"); got != "[(nil)]" {
				t.Errorf("COMMAND INFO of an unknown command: %q", got)
			}
		})
	}
}

// entriesToCompare are name itself, or, for a container, its subcommands
// (the container's own entry lists only those lockproxy serves).
func entriesToCompare(t *testing.T, lp *rawConn, name string) []string {
	t.Helper()
	reply := lp.do("COMMAND", "INFO", name)
	if !strings.Contains(reply, name+"|") {
		return []string{name}
	}
	var subs []string
	for _, f := range strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(reply)) {
		if strings.HasPrefix(f, name+"|") {
			subs = append(subs, f)
		}
	}
	return subs
}

// checkOwnEntry checks an entry Redis 7.0 has not: ten elements, and, for a
// command with a key, the key at position 1 as COMMAND GETKEYS finds it.
func checkOwnEntry(t *testing.T, lp *rawConn, name string) {
	t.Helper()
	entry := lp.rawDo("COMMAND", "INFO", name)
	if !strings.HasPrefix(entry, "*1\r\n*10\r\n$"+strconv.Itoa(len(name))+"\r\n"+name+"\r\n") {
		t.Errorf("COMMAND INFO %s: %.80q", name, entry)
	}
	if ownSamples[name] == nil {
		return // no key: LOCKPROXY, WAITAOF
	}
	args := append([]string{"COMMAND", "GETKEYS", name}, ownSamples[name]...)
	if got := lp.do(args...); got != "[k1]" {
		t.Errorf("%v: %q", args, got)
	}
}

// ownSamples are arguments for each command Redis 7.0 has not, whose key is k1.
var ownSamples = map[string][]string{"lock": {"k1"}, "unlock": {"k1", "t"}, "renew": {"k1", "t"}, "lockinfo": {"k1"},
	"delex": {"k1"}, "delifeq": {"k1", "v"}}

// TestCommandGetKeys: COMMAND GETKEYS and its errors, as Redis 7.0 gives
// them, on a plain redis-server and through lockproxy.
func TestCommandGetKeys(t *testing.T) {
	for _, target := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return redistest.Start(t, redistest.Options{}).Addr() }},
		{"lockproxy", func(t *testing.T) string { return startInstance(t, embeddedConfig()).Addr() }},
	} {
		t.Run(target.name, func(t *testing.T) {
			r := dialRaw(t, target.addr(t))
			for _, s := range [][2]string{
				{"COMMAND GETKEYS set k v NX PX 100", "[k]"},
				{"COMMAND GETKEYS del a b c", "[a b c]"},
				{"COMMAND GETKEYS blpop a b 0", "[a b]"},
				{"COMMAND GETKEYS nosuch a", "-ERR Invalid command specified"},
				{"COMMAND GETKEYS get a b", "-ERR Invalid number of arguments specified for command"},
				{"COMMAND GETKEYS ping a", "-ERR The command has no key arguments"},
				{"COMMAND GETKEYS get", "-ERR wrong number of arguments for 'command|getkeys' command"},
				{"COMMAND COUNT x", "-ERR wrong number of arguments for 'command|count' command"},
				{"COMMAND FOO", "-ERR unknown subcommand 'FOO'. Try COMMAND HELP."},
				{"COMMAND DOCS nosuch", "[]"},
			} {
				if got := r.do(strings.Fields(s[0])...); got != s[1] {
					t.Errorf("%s: %q, want %q", s[0], got, s[1])
				}
			}
		})
	}
}

// TestCommandClientsFindKeys: go-redis reads COMMAND (as its cluster and
// ring clients do to route by key) and redis-py's CommandsParser (its
// cluster client's key lookup) finds the keys of lock commands.
func TestCommandClientsFindKeys(t *testing.T) {
	in := startInstance(t, embeddedConfig())
	c := newClient(t, in.Addr(), 2)
	infos, err := c.Command(context.Background()).Result()
	if err != nil {
		t.Fatalf("go-redis COMMAND: %v", err)
	}
	for name, pos := range map[string]int8{"lock": 1, "unlock": 1, "set": 1, "get": 1, "eval": 0, "ping": 0} {
		if infos[name] == nil || infos[name].FirstKeyPos != pos {
			t.Errorf("go-redis COMMAND: %s: %+v, want first key %d", name, infos[name], pos)
		}
	}
	if !infos["get"].ReadOnly || infos["set"].ReadOnly || !infos["lockinfo"].ReadOnly {
		t.Errorf("go-redis COMMAND: read-only flags wrong")
	}
	host, port, _ := strings.Cut(in.Addr(), ":")
	script := `import redis, sys
from redis.commands.parser import CommandsParser
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))
p = CommandsParser(r)
for args, want in [(("LOCK", "k1", "PX", "100"), ["k1"]), (("UNLOCK", "k2", "t"), ["k2"]), (("SET", "k3", "v", "NX"), ["k3"]),
                   (("EVAL", "return 1", "2", "a", "b"), ["a", "b"]), (("DEL", "x", "y"), ["x", "y"])]:
    got = p.get_keys(r, *args)
    print(("ok " if got == want else "FAIL ") + repr(args) + " -> " + repr(got))
`
	out, err := exec.Command(systemPython, "-c", script, host, port).CombinedOutput()
	if err != nil || strings.Contains(string(out), "FAIL") || strings.Count(string(out), "ok ") != 5 {
		t.Fatalf("redis-py CommandsParser: %v\n%s", err, out)
	}
}
