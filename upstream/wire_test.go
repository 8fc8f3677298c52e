package upstream

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRespReader: each kind of RESP2 reply reads as go-redis reads it.
func TestRespReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10) // beyond the reader's buffer
	for _, tc := range []struct {
		in    string
		want  any
		reply error
	}{
		{"+OK\r\n", "OK", nil},
		{":-42\r\n", int64(-42), nil},
		{":9223372036854775807\r\n", int64(9223372036854775807), nil},
		{":-9223372036854775808\r\n", int64(-9223372036854775808), nil},
		{"$5\r\nhe\r\no\r\n", "he\r\no", nil},
		{"$0\r\n\r\n", "", nil},
		{"$-1\r\n", nil, redis.Nil},
		{"*-1\r\n", nil, redis.Nil},
		{"-NOSCRIPT No matching script\r\n", nil, replyError("NOSCRIPT No matching script")},
		{"*0\r\n", []any{}, nil},
		{"*4\r\n$3\r\ntok\r\n:7\r\n$-1\r\n-ERR no\r\n", []any{"tok", int64(7), nil, replyError("ERR no")}, nil},
		{"*2\r\n*1\r\n+a\r\n*-1\r\n", []any{[]any{"a"}, nil}, nil},
		{"$" + strconv.Itoa(len(long)) + "\r\n" + long + "\r\n", long, nil},
		{"-" + long + "\r\n", nil, replyError(long)},
	} {
		r := newRespReader(strings.NewReader(tc.in + ":1\r\n"))
		v, reply, err := r.reply()
		if err != nil || !reflect.DeepEqual(v, tc.want) || !reflect.DeepEqual(reply, tc.reply) {
			t.Errorf("%.40q: %#v, %v, %v; want %#v, %v", tc.in, v, reply, err, tc.want, tc.reply)
			continue
		}
		if next, _, err := r.reply(); err != nil || next != int64(1) { // the reply was read whole, no more
			t.Errorf("%.40q: next reply %#v, %v", tc.in, next, err)
		}
	}
	if !redis.HasErrorPrefix(replyError("NOSCRIPT x"), "NOSCRIPT") {
		t.Error("a replyError is not a redis.Error")
	}
	for _, bad := range []string{"", "\r\n", "?x\r\n", ":12a\r\n", ":99999999999999999999\r\n", "$3\r\nabcd\r\n",
		"$-2\r\n", "*-5\r\n", "+OK\n", "$3\r\nab", "*2\r\n:1\r\n", strings.Repeat("*1\r\n", maxDepth+1) + ":1\r\n"} {
		if v, reply, err := newRespReader(strings.NewReader(bad)).reply(); err == nil {
			t.Errorf("%.40q read as %#v, %v; want an error", bad, v, reply)
		}
	}
}

// TestAppendScript: a script call is written as the command go-redis
// writes, every argument type as go-redis formats it.
func TestAppendScript(t *testing.T) {
	s := &script{sha: "abc", src: "return 1"}
	got := appendScript(nil, s, false, []string{"k1", "k2"}, []any{"a", int64(-3), 12, 1.5, true, []byte("b")})
	want := "*11\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n2\r\n$2\r\nk1\r\n$2\r\nk2\r\n$1\r\na\r\n$2\r\n-3\r\n$2\r\n12\r\n$3\r\n1.5\r\n$1\r\n1\r\n$1\r\nb\r\n"
	if string(got) != want {
		t.Errorf("EVALSHA:\n%q\nwant\n%q", got, want)
	}
	keys := make([]string, 12)
	got = appendScript(nil, s, true, keys, nil)
	if !bytes.HasPrefix(got, []byte("*15\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$2\r\n12\r\n$0\r\n\r\n")) {
		t.Errorf("EVAL with 12 keys: %q", got)
	}
}

// FuzzRespReader: any bytes from a node read as replies or as an error,
// without panicking or reading past what a reply claims; what is read
// back after writing it again (as a reply) is the same.
func FuzzRespReader(f *testing.F) {
	for _, s := range []string{"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*2\r\n:1\r\n-ERR x\r\n",
		"*3\r\n*1\r\n$0\r\n\r\n*-1\r\n+s\r\n", "-NOSCRIPT x\r\n", "*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newRespReader(bytes.NewReader(in))
		for range 100 {
			v, reply, err := r.reply()
			if err != nil {
				return
			}
			var out []byte
			if reply != nil {
				out = appendValue(nil, reply)
			} else {
				out = appendValue(nil, v)
			}
			again, reply2, err := newRespReader(bytes.NewReader(out)).reply()
			if err != nil || !reflect.DeepEqual(again, v) || !errors.Is(reply2, reply) && !reflect.DeepEqual(reply2, reply) {
				t.Fatalf("%q read as %#v, %v; written as %q, read back as %#v, %v, %v", in, v, reply, out, again, reply2, err)
			}
		}
	})
}

// appendValue writes a value read by respReader back as RESP (a nil as a
// null bulk string, redis.Nil likewise).
func appendValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "$-1\r\n"...)
	case string:
		return appendBulk(b, v)
	case int64:
		return appendHeader(b, ':', int(v))
	case replyError:
		return append(append(append(b, '-'), v...), "\r\n"...)
	case []any:
		b = appendHeader(b, '*', len(v))
		for _, e := range v {
			b = appendValue(b, e)
		}
		return b
	case error: // redis.Nil
		return append(b, "$-1\r\n"...)
	}
	panic("unexpected value")
}
