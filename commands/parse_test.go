package commands

import (
	"strings"
	"testing"
	"time"
)

func argv(s string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(s) {
		if f == `""` {
			f = ""
		}
		out = append(out, []byte(f))
	}
	return out
}

func TestParseLock(t *testing.T) {
	l := Limits{MaxKeyBytes: 8, MaxTokenBytes: 4}.withDefaults()
	cases := []struct {
		in   string
		want lockArgs
		err  string
	}{
		{in: "LOCK k", want: lockArgs{key: "k"}},
		{in: "LOCK k PX 1500", want: lockArgs{key: "k", ttl: 1500 * time.Millisecond}},
		{in: "lock k ex 2", want: lockArgs{key: "k", ttl: 2 * time.Second}},
		{in: "LOCK k token abc Px 5", want: lockArgs{key: "k", ttl: 5 * time.Millisecond, token: "abc"}},
		{in: "LOCK k WAIT 0", want: lockArgs{key: "k", waits: true}},
		{in: "LOCK k WAIT 250 EX 1", want: lockArgs{key: "k", ttl: time.Second, wait: 250 * time.Millisecond, waits: true}},
		{in: `LOCK "" PX 1`, err: "ERR invalid key: empty"},
		{in: "LOCK 123456789 PX 1", err: "ERR invalid key: longer than 8 bytes (max_key_bytes)"},
		{in: "LOCK k TOKEN abcde", err: "ERR invalid token: longer than 4 bytes (max_token_bytes)"},
		{in: `LOCK k TOKEN ""`, err: "ERR invalid token: empty"},
		{in: "LOCK k PX", err: "ERR syntax error"},
		{in: "LOCK k PX 1 EX 1", err: "ERR syntax error"},
		{in: "LOCK k EX 1 EX 1", err: "ERR syntax error"},
		{in: "LOCK k NX 1", err: "ERR syntax error"},
		{in: "LOCK k PX x", err: "ERR value is not an integer or out of range"},
		{in: "LOCK k PX 0", err: "ERR invalid expire time in 'lock' command"},
		{in: "LOCK k PX -1", err: "ERR invalid expire time in 'lock' command"},
		{in: "LOCK k EX 9223372036854775", err: "ERR invalid expire time in 'lock' command"},
		{in: "LOCK k PX 9223372036854", want: lockArgs{key: "k", ttl: 9223372036854 * time.Millisecond}},
		{in: "LOCK k WAIT -1", err: "ERR timeout is negative"},
	}
	for _, tc := range cases {
		got, err := l.parseLock(argv(tc.in))
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%s: err %v, want %s", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%s: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseRenew(t *testing.T) {
	l := Limits{}.withDefaults()
	cases := []struct {
		in  string
		ttl time.Duration
		err string
	}{
		{in: "RENEW k t"},
		{in: "RENEW k t px 2000", ttl: 2 * time.Second},
		{in: "RENEW k t PX 0", err: "ERR invalid expire time in 'renew' command"},
		{in: "RENEW k t EX 2", err: "ERR syntax error"},
		{in: "RENEW k t PX", err: "ERR syntax error"},
		{in: `RENEW k "" PX 1`, err: "ERR invalid token: empty"},
	}
	for _, tc := range cases {
		_, _, ttl, err := l.parseRenew(argv(tc.in))
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) || ttl != tc.ttl {
			t.Errorf("%s: ttl %v err %v, want %v %q", tc.in, ttl, err, tc.ttl, tc.err)
		}
	}
}

// splitArgs turns fuzz bytes into arguments separated by NUL.
func splitArgs(data []byte) [][]byte {
	args := [][]byte{[]byte("LOCK")}
	for _, a := range strings.Split(string(data), "\x00") {
		args = append(args, []byte(a))
	}
	return args
}

// FuzzParseLock: any arguments parse to an error or to values within the
// limits; nothing panics.
func FuzzParseLock(f *testing.F) {
	for _, s := range []string{"k", "k\x00PX\x001000", "k\x00ex\x005\x00token\x00t", "k\x00WAIT\x000", "\x00PX\x00-1", "k\x00PX\x0099999999999999999999"} {
		f.Add([]byte(s))
	}
	l := Limits{MaxKeyBytes: 16, MaxTokenBytes: 8}.withDefaults()
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := l.parseLock(splitArgs(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ERR ") {
				t.Fatalf("error without a RESP code: %v", err)
			}
			return
		}
		if a.key == "" || len(a.key) > 16 || len(a.token) > 8 || a.ttl < 0 || a.wait < 0 {
			t.Fatalf("out of limits: %+v", a)
		}
	})
}

// FuzzParseRenew: the same for RENEW.
func FuzzParseRenew(f *testing.F) {
	for _, s := range []string{"k\x00t", "k\x00t\x00PX\x00100", "k\x00t\x00px\x00-4"} {
		f.Add([]byte(s))
	}
	l := Limits{}.withDefaults()
	f.Fuzz(func(t *testing.T, data []byte) {
		args := splitArgs(data)
		if len(args) < 3 {
			return // the table's arity check comes first
		}
		key, token, ttl, err := l.parseRenew(args)
		if err == nil && (key == "" || token == "" || ttl < 0) {
			t.Fatalf("accepted %q %q %v", key, token, ttl)
		}
	})
}
