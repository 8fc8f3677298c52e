package commands

import (
	"bytes"
	"math/bits"
	"strings"
	"testing"
	"time"
)

var now = time.UnixMilli(1_700_000_000_000)

func TestParseSet(t *testing.T) {
	l := Limits{}.withDefaults()
	cases := []struct {
		in      string
		flags   setFlag
		ttl     time.Duration
		expired bool
		err     string
	}{
		{in: "SET k v NX", flags: setNX},
		{in: "set k v px 1500 nx", flags: setNX | setPX, ttl: 1500 * time.Millisecond},
		{in: "SET k v ex 8 nx", flags: setNX | setEX, ttl: 8 * time.Second},
		{in: "SET k v NX EX 10 EX 20", flags: setNX | setEX, ttl: 20 * time.Second},
		{in: "SET k v NX PXAT 1700000001000", flags: setNX | setPXAT, ttl: time.Second},
		{in: "SET k v NX EXAT 1", flags: setNX | setEXAT, ttl: -1_699_999_999_000 * time.Millisecond, expired: true},
		{in: "SET k v NX KEEPTTL GET", flags: setNX | setKeepTTL | setGet},
		{in: "SET k v", flags: 0},
		{in: "SET k v NX XX", err: "ERR syntax error"},
		{in: "SET k v PX 1 EX 1", err: "ERR syntax error"},
		{in: "SET k v KEEPTTL PX 1", err: "ERR syntax error"},
		{in: "SET k v NX PX", err: "ERR syntax error"},
		{in: "SET k v PX 0", err: "ERR invalid expire time in 'set' command"},
		{in: "SET k v EX 9223372036854775", err: "ERR invalid expire time in 'set' command"},
		{in: "SET k v PX 1.5", err: "ERR value is not an integer or out of range"},
		{in: `SET "" v NX`, err: "ERR invalid key: empty"},
		// Issue 26: integers as Redis's string2ll reads them, Redis 7.0's
		// ranges, TTLs beyond time.Duration capped.
		{in: "SET k v NX PX +5000", err: "ERR value is not an integer or out of range"},
		{in: "SET k v NX PX 010", err: "ERR value is not an integer or out of range"},
		{in: "SET k v NX EX -0", err: "ERR value is not an integer or out of range"},
		{in: "SET k v NX EXAT 99999999999", flags: setNX | setEXAT, ttl: maxLegacyTTL * time.Millisecond},
		{in: "SET k v NX EX 9223372036854", flags: setNX | setEX, ttl: maxLegacyTTL * time.Millisecond},
		{in: "SET k v NX PX 9223372036854775807", err: "ERR invalid expire time in 'set' command"},
		{in: "SET k v NX PXAT 9223372036854775807", flags: setNX | setPXAT, ttl: maxLegacyTTL * time.Millisecond},
		{in: "SET k v NX EX 9223372036854776", err: "ERR invalid expire time in 'set' command"},
		{in: `SET k "" NX`, flags: setNX},
	}
	for _, c := range cases {
		a, err := l.parseSet(argv(c.in), now)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: err %v, want %s", c.in, err, c.err)
			}
			continue
		}
		if err != nil || a.flags != c.flags || a.ttl != c.ttl || a.expired != c.expired {
			t.Errorf("%s: %+v %v, want flags %b ttl %v expired %v", c.in, a, err, c.flags, c.ttl, c.expired)
		}
	}
}

func TestExpireFlagsAllow(t *testing.T) {
	cases := []struct {
		flags        expireFlag
		current, ttl int64
		want         bool
	}{
		{0, -1, 10, true}, {expireNX, -1, 10, true}, {expireNX, 5, 10, false},
		{expireXX, -1, 10, false}, {expireXX, 5, 10, true},
		{expireGT, -1, 10, false}, {expireGT, 5, 10, true}, {expireGT, 50, 10, false},
		{expireLT, -1, 10, true}, {expireLT, 5, 10, false}, {expireLT, 50, 10, true},
		{expireXX | expireGT, 5, 10, true}, {expireXX | expireLT, -1, 10, false},
	}
	for _, c := range cases {
		if got := c.flags.allows(c.current, c.ttl); got != c.want {
			t.Errorf("flags %b current %d ttl %d: %v", c.flags, c.current, c.ttl, got)
		}
	}
}

// FuzzParseSet: SET's parser never panics, and what it accepts is coherent.
func FuzzParseSet(f *testing.F) {
	for _, s := range []string{"SET k v NX PX 100", "SET k v nx ex 8", "SET k v NX XX", "SET k v NX EXAT 1", "SET k v GET KEEPTTL NX", "SET k v PX"} {
		f.Add([]byte(s))
	}
	l := Limits{MaxKeyBytes: 16, MaxTokenBytes: 16}.withDefaults()
	f.Fuzz(func(t *testing.T, line []byte) {
		args := bytes.Split(line, []byte(" "))
		if len(args) < 3 {
			return
		}
		a, err := l.parseSet(args, now)
		if err != nil {
			return
		}
		switch {
		case a.key == "" || len(a.key) > 16 || a.value != string(args[2]) || len(a.value) > 16: // "" is a value: a random token
			t.Fatalf("%q: key %q value %q past the limits", line, a.key, a.value)
		case a.flags&setNX != 0 && a.flags&setXX != 0:
			t.Fatalf("%q: NX and XX", line)
		case bits.OnesCount8(uint8(a.flags&setExpiry)) > 1 || a.flags&setExpiry != 0 && a.flags&setKeepTTL != 0:
			t.Fatalf("%q: flags %b", line, a.flags)
		case a.flags&setExpiry == 0 && a.ttl != 0, a.flags&setExpiry != 0 && (a.ttl <= 0) != a.expired, a.ttl > maxLegacyTTL*time.Millisecond:
			t.Fatalf("%q: ttl %v expired %v", line, a.ttl, a.expired)
		}
	})
}

// FuzzParseExpire: EXPIRE's parser never panics and keeps TTLs in range.
func FuzzParseExpire(f *testing.F) {
	for _, s := range []string{"EXPIRE k 10", "PEXPIRE k -1 nx", "EXPIRE k 10 GT LT", "EXPIRE k 9223372036854775807"} {
		f.Add([]byte(s))
	}
	l := Limits{}.withDefaults()
	f.Fuzz(func(t *testing.T, line []byte) {
		args := bytes.Split(line, []byte(" "))
		if len(args) < 3 {
			return
		}
		a, err := l.parseExpire(args, time.Second)
		if err != nil {
			return
		}
		if a.ttl > maxLegacyTTL || a.ttl%1000 != 0 { // at or below 0 (down to Redis's LLONG_MIN/1000 s) deletes
			t.Fatalf("%q: ttl %d", line, a.ttl)
		}
		if a.flags&expireNX != 0 && a.flags != expireNX || a.flags&expireGT != 0 && a.flags&expireLT != 0 {
			t.Fatalf("%q: flags %b", line, a.flags)
		}
	})
}

// TestString2ll: Redis's string2ll, which SET, EXPIRE and EVAL's numkeys
// read integers with.
func TestString2ll(t *testing.T) {
	for in, want := range map[string]bool{
		"0": true, "5": true, "-5": true, "9223372036854775807": true, "-9223372036854775808": true,
		"+5": false, "010": false, "-0": false, "00": false, " 5": false, "5 ": false, "": false, "-": false,
		"9223372036854775808": false, "1e3": false, "0x10": false, "5.0": false,
	} {
		if _, ok := string2ll([]byte(in)); ok != want {
			t.Errorf("string2ll(%q) = %v, want %v", in, ok, want)
		}
	}
}

// TestParseExpireLikeRedis: EXPIRE's integer and range as Redis 7.0's.
func TestParseExpireLikeRedis(t *testing.T) {
	l := Limits{}.withDefaults()
	for in, want := range map[string]string{
		"EXPIRE k 010": "ERR value is not an integer or out of range", "EXPIRE k +10": "ERR value is not an integer or out of range",
		"EXPIRE k 9223372036854776": "ERR invalid expire time in 'expire' command", "EXPIRE k 10": "",
		"PEXPIRE k 9223372036854775807": "ERR invalid expire time in 'pexpire' command", "PEXPIRE k 9223372036855": "",
		"EXPIRE k -9223372036854775": "",
	} {
		a, err := l.parseExpire(argv(in), map[bool]time.Duration{true: time.Second, false: time.Millisecond}[strings.HasPrefix(in, "EXPIRE")])
		if want == "" && (err != nil || a.ttl > maxLegacyTTL) || want != "" && (err == nil || err.Error() != want) {
			t.Errorf("%s: %+v %v, want %q", in, a, err, want)
		}
	}
}
