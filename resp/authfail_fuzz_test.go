package resp_test

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/resp"
)

// FuzzAuth sends AUTH or HELLO with the fuzzer's arguments (split at
// 0x00), repeated times times, then PING, to a server with a password and
// a user. Every reply is a whole RESP reply of the kinds Redis gives; the
// server counts exactly the WRONGPASS replies it wrote; a connection is
// closed right after its tenth WRONGPASS and not before, or after a
// request over the unauthenticated limits; otherwise PING
// answers PONG once authenticated and NOAUTH before.
func FuzzAuth(f *testing.F) {
	for _, seed := range []struct {
		hello bool
		args  string
		times uint8
	}{
		{false, "pw", 1}, {false, "wrong", 12}, {false, "alice\x00alice-pw", 1}, {false, "alice\x00pw", 3},
		{false, "", 1}, {false, "a\x00b\x00c", 2}, {true, "3\x00AUTH\x00default\x00pw", 1},
		{true, "3\x00AUTH\x00alice\x00x\x00SETNAME\x00n", 11}, {true, "2\x00SETNAME\x00a b", 1}, {true, "", 1},
	} {
		f.Add(seed.hello, []byte(seed.args), seed.times)
	}
	s := newOpsServer(f, resp.Config{Password: "pw"})
	s.srv.SetUsers([]resp.User{{Name: "alice", Password: "alice-pw", Keys: []string{"a:*"}, Native: true}})
	f.Fuzz(func(t *testing.T, hello bool, raw []byte, times uint8) {
		name := "AUTH"
		if hello {
			name = "HELLO"
		}
		args := append([]string{name}, strings.Split(string(raw), "\x00")...)
		if len(raw) == 0 {
			args = args[:1]
		}
		fuzzAuthConn(t, s, args, int(times%13)+1)
	})
}

func fuzzAuthConn(t *testing.T, s *opsServer, args []string, times int) {
	c := s.dial(t)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	before := s.srv.AuthFailures()
	c.send(t, strings.Repeat(frame(args...), times)+frame("PING"))
	wrong, authed := 0, false
	for i := 0; i < times; i++ {
		r, err := readAny(c.r)
		if err != nil {
			t.Fatalf("reply %d of %d to %q: %v", i+1, times, args, err)
		}
		switch {
		case strings.HasPrefix(r, "-ERR Protocol error: "): // over the unauthenticated limits
			if !c.closed() {
				t.Fatalf("%q: open after %q", args, r)
			}
			return
		case strings.HasPrefix(r, "-WRONGPASS "):
			wrong++
		case r[0] == '-':
			if !hasAny(r, "-ERR ", "-NOAUTH ", "-NOPROTO ") {
				t.Fatalf("%q: error %q", args, r)
			}
		default:
			authed = true
		}
		if wrong == 10 {
			if !c.closed() {
				t.Fatalf("%q: the connection stayed open after ten wrong passwords", args)
			}
			break
		}
	}
	if got := s.srv.AuthFailures() - before; got != int64(wrong) {
		t.Fatalf("%q x%d: %d WRONGPASS replies, %d failures counted", args, times, wrong, got)
	}
	if wrong == 10 {
		return
	}
	r, err := readAny(c.r)
	if err != nil || !(authed && r == "+PONG" || !authed && strings.HasPrefix(r, "-NOAUTH ")) {
		t.Fatalf("%q x%d: PING after (authenticated %v): %q %v", args, times, authed, r, err)
	}
}

func hasAny(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// readAny reads one whole RESP2 or RESP3 reply and returns its first line
// (the header of an aggregate).
func readAny(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty line")
	}
	n, _ := strconv.Atoi(line[1:])
	switch line[0] {
	case '$':
		if n >= 0 {
			_, err = io.CopyN(io.Discard, r, int64(n)+2)
		}
	case '*', '%', '>', '~':
		if line[0] == '%' {
			n *= 2
		}
		for i := 0; i < n && err == nil; i++ {
			_, err = readAny(r)
		}
	case '+', '-', ':', '_', '#', ',':
	default:
		err = errors.New("not a RESP reply: " + strconv.Quote(line))
	}
	return line, err
}
