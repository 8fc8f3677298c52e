package luascript

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The oracle of FuzzAdmitOnRedis: an admitted script runs on a real
// redis-server while a MONITOR connection records every command the
// script makes ("[0 lua]" lines); each command's keys (COMMAND GETKEYS,
// the server's own answer) and channels must be ones the script was
// admitted for.

// oracleKEYS and oracleARGV are what every script runs with; ARGV names a
// victim key, lockproxy's release channel and a key of KEYS.
var (
	oracleKEYS = []string{"fz:a", "fz:h"}
	oracleARGV = []string{"victim", "lockproxy:released", "3", "fz:a"}
)

type oracle struct {
	c   *redis.Client
	mon *bufio.Reader
	n   int // markers sent
}

func newOracle(t testing.TB) *oracle {
	s := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	conn, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	o := &oracle{c: c, mon: bufio.NewReader(conn)}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := o.mon.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	conn.SetReadDeadline(time.Time{})
	return o
}

// run runs src with the oracle's KEYS and ARGV on a fresh database and
// returns the commands the script made, each as its arguments.
func (o *oracle) run(t *testing.T, src string) [][]string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o.prepare(ctx, t)
	args := []any{"EVAL", src, len(oracleKEYS)}
	for _, s := range append(append([]string(nil), oracleKEYS...), oracleARGV...) {
		args = append(args, s)
	}
	if err := o.c.Do(ctx, args...).Err(); err != nil && !isRedisError(err) {
		t.Fatalf("EVAL: %v", err)
	}
	o.n++
	marker := "fz-end-" + strconv.Itoa(o.n)
	if err := o.c.Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	return o.scriptCommands(t, marker)
}

// prepare empties the database and writes the keys scripts meet.
func (o *oracle) prepare(ctx context.Context, t *testing.T) {
	p := o.c.TxPipeline()
	p.FlushAll(ctx)
	p.Set(ctx, "victim", "held-by-another", 0)
	p.Set(ctx, "fz:a", "5", 0)
	p.HSet(ctx, "fz:h", "victim", "1", "x", "2")
	p.SAdd(ctx, "fz:a:set", "m1", "m2")
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.Is(err, redis.Nil) || errors.As(err, &re)
}

// scriptCommands reads MONITOR up to the ECHO of marker and returns the
// commands the script made.
func (o *oracle) scriptCommands(t *testing.T, marker string) [][]string {
	var out [][]string
	for {
		line, err := o.mon.ReadString('\n')
		if err != nil {
			t.Fatalf("MONITOR: %v", err)
		}
		_, rest, ok := strings.Cut(strings.TrimSuffix(line, "\r\n"), "] ")
		if !ok {
			t.Fatalf("MONITOR line %q", line)
		}
		args, err := unrepr(rest)
		if err != nil {
			t.Fatalf("MONITOR line %q: %v", line, err)
		}
		if strings.Contains(line, " [0 lua] ") {
			out = append(out, args)
		} else if len(args) == 2 && strings.EqualFold(args[0], "echo") && args[1] == marker {
			return out
		}
	}
}

// unrepr splits a MONITOR line's arguments, each written by Redis's
// sdscatrepr: "..." with \\ \" \n \r \t \a \b and \xHH escapes.
func unrepr(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			return nil, fmt.Errorf("at %d: %q", i, s[i:])
		}
		var b strings.Builder
		for i++; ; i++ {
			if i >= len(s) {
				return nil, errors.New("unfinished argument")
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c != '\\' {
				b.WriteByte(c)
				continue
			}
			i++
			switch e := s[i]; e {
			case 'n', 'r', 't', 'a', 'b':
				b.WriteByte(map[byte]byte{'n': '\n', 'r': '\r', 't': '\t', 'a': '\a', 'b': '\b'}[e])
			case 'x':
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return nil, err
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(e)
			}
		}
		out = append(out, b.String())
	}
	return out, nil
}

// check fails t if a command of the script touched a key or channel it
// was not admitted for, or a script admitted as not writing wrote, or a
// script that writes ran a command whose result differs per node.
func (o *oracle) check(t *testing.T, a *Admitted, src string, cmds [][]string) {
	writes, random := "", ""
	for _, cmd := range cmds {
		name := strings.ToLower(cmd[0])
		spec, ok := allowed[name]
		if !ok {
			t.Fatalf("the script ran %s, not an allowed command:\n%s", name, src)
		}
		if spec.write {
			writes = name
		}
		if randomResult[name] != "" {
			random = name
		}
		for _, k := range o.keysOf(t, cmd) {
			if !admittedKey(a, k) {
				t.Fatalf("admitted (DerivesKeys %v) but %s touched %q outside KEYS %q:\n%s", a.DerivesKeys, name, k, oracleKEYS, src)
			}
		}
	}
	if writes != "" && !a.Writes {
		t.Fatalf("admitted as not writing, but ran %s:\n%s", writes, src)
	}
	if writes != "" && random != "" {
		t.Fatalf("a script that writes (%s) ran %s, whose result differs per node:\n%s", writes, random, src)
	}
}

// admittedKey reports whether the admission of a covers key: an element
// of KEYS, or, for a script that derives keys, a string that begins with
// one.
func admittedKey(a *Admitted, key string) bool {
	for _, k := range oracleKEYS {
		if key == k || a.DerivesKeys && strings.HasPrefix(key, k) {
			return true
		}
	}
	return false
}

// keysOf is the keys (or the channel) of one command, as the server
// tells them.
func (o *oracle) keysOf(t *testing.T, cmd []string) []string {
	name := strings.ToLower(cmd[0])
	if name == "publish" || name == "spublish" {
		return cmd[1:2]
	}
	if name == "time" {
		return nil
	}
	args := []any{"COMMAND", "GETKEYS"}
	for _, s := range cmd {
		args = append(args, s)
	}
	keys, err := o.c.Do(context.Background(), args...).StringSlice()
	if err != nil && strings.Contains(err.Error(), "no key arguments") {
		return nil
	}
	if err != nil {
		t.Fatalf("COMMAND GETKEYS %q: %v", cmd, err)
	}
	return keys
}
