package commands

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// setArgs is SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL].
type setArgs struct {
	key, value string
	flags      setFlag
	ttl        time.Duration // 0: no TTL (a connection-bound lock)
	// expired is an EXAT or PXAT already past: Redis replies as if it set
	// the key and drops it at once, so nothing is locked.
	expired bool
}

type setFlag uint8

const (
	setNX setFlag = 1 << iota
	setXX
	setGet
	setKeepTTL
	setEX
	setPX
	setEXAT
	setPXAT
)

// setExpiry is any option that gives the key a TTL.
const setExpiry = setEX | setPX | setEXAT | setPXAT

// setOptions are SET's options: the flags each may not follow, and whether
// it takes a value. Repeating an option is allowed, as Redis allows it; the
// last value wins.
var setOptions = map[string]struct {
	flag     setFlag
	excludes setFlag
	valued   bool
}{
	"NX":      {setNX, setXX, false},
	"XX":      {setXX, setNX, false},
	"GET":     {setGet, 0, false},
	"KEEPTTL": {setKeepTTL, setExpiry, false},
	"EX":      {setEX, setKeepTTL | setExpiry&^setEX, true},
	"PX":      {setPX, setKeepTTL | setExpiry&^setPX, true},
	"EXAT":    {setEXAT, setKeepTTL | setExpiry&^setEXAT, true},
	"PXAT":    {setPXAT, setKeepTTL | setExpiry&^setPXAT, true},
}

// parseSet parses SET's arguments as Redis does: a syntax error first,
// then the expiry's value, then lockproxy's own limits.
func (l Limits) parseSet(args [][]byte, now time.Time) (setArgs, error) {
	var a setArgs
	var expiry []byte
	for i := 3; i < len(args); i++ {
		opt, ok := setOptions[upper(args[i])]
		if !ok || a.flags&opt.excludes != 0 || opt.valued && i+1 >= len(args) {
			return a, errSyntax
		}
		a.flags |= opt.flag
		if opt.valued {
			i++
			expiry = args[i]
		}
	}
	if a.flags&setExpiry != 0 {
		ms, err := setExpiryMillis(a.flags, expiry, now)
		if err != nil {
			return a, err
		}
		a.ttl, a.expired = time.Duration(ms)*time.Millisecond, ms <= 0
	}
	var err error
	if a.key, err = l.key(args[1]); err != nil {
		return a, err
	}
	a.value, err = l.value(args[2])
	return a, err
}

// value reads SET's or SETNX's value as the lock's token. The empty value,
// which Redis takes like any other, means "no token of my own": the lock
// gets a random one, as LOCK without TOKEN (GET shows it), and is released
// by DEL or with that token.
func (l Limits) value(b []byte) (string, error) {
	if len(b) == 0 {
		return "", nil
	}
	return l.token(b)
}

// setExpiryMillis is the TTL in ms that SET's expiry option gives; at or
// below zero for an absolute time already past. The range is Redis 7.0's
// (getExpireMillisecondsOrReply): a positive integer, seconds at most
// LLONG_MAX/1000, and a relative time whose deadline (now + ms) fits in
// int64. A TTL longer than maxLegacyTTL (100 years) is capped there: the
// lock outlives every client either way, and the backends' arithmetic on
// it (whole milliseconds rounded up, deadlines) stays within int64.
func setExpiryMillis(flags setFlag, b []byte, now time.Time) (int64, error) {
	n, ok := string2ll(b)
	switch {
	case !ok:
		return 0, errNotInteger
	case n <= 0 || flags&(setEX|setEXAT) != 0 && n > math.MaxInt64/1000:
		return 0, invalidExpire("set")
	}
	if flags&(setEX|setEXAT) != 0 {
		n *= 1000
	}
	if flags&(setEXAT|setPXAT) != 0 {
		n -= now.UnixMilli()
	} else if n > math.MaxInt64-now.UnixMilli() {
		return 0, invalidExpire("set") // the deadline overflows, as in Redis
	}
	return min(n, maxLegacyTTL), nil
}

// maxLegacyTTL caps the TTLs SET and EXPIRE accept beyond it, in ms: 100
// years.
const maxLegacyTTL = 36525 * 24 * 3600 * 1000 // 100 years of 365.25 days

// string2ll parses b as Redis's string2ll, which every integer argument
// of SET, EXPIRE and EVAL goes through: an optional '-', then decimal
// digits with no leading zero (or exactly "0"), fitting in int64. "+5",
// "010", "-0", " 5" and "" are not integers.
func string2ll(b []byte) (int64, bool) {
	s := string(b)
	if s == "0" {
		return 0, true
	}
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(s) >= 21 || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	for i := 1; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// expireArgs is EXPIRE key seconds [NX | XX | GT | LT], or PEXPIRE's.
type expireArgs struct {
	key   string
	ttl   int64 // ms; at or below zero deletes the key
	flags expireFlag
}

type expireFlag uint8

const (
	expireNX expireFlag = 1 << iota
	expireXX
	expireGT
	expireLT
)

var expireOptions = map[string]expireFlag{"NX": expireNX, "XX": expireXX, "GT": expireGT, "LT": expireLT}

// Redis's errors for EXPIRE's options.
var (
	errExpireNX   error = argError("ERR NX and XX, GT or LT options at the same time are not compatible")
	errExpireGTLT error = argError("ERR GT and LT options at the same time are not compatible")
)

// parseExpire parses EXPIRE's (unit time.Second) or PEXPIRE's arguments,
// in Redis's order: the options, then the number.
func (l Limits) parseExpire(args [][]byte, unit time.Duration) (expireArgs, error) {
	var a expireArgs
	cmd := strings.ToLower(string(args[0]))
	for _, b := range args[3:] {
		f, ok := expireOptions[upper(b)]
		if !ok {
			return a, argError("ERR Unsupported option " + string(b))
		}
		a.flags |= f
	}
	switch {
	case a.flags&expireNX != 0 && a.flags&(expireXX|expireGT|expireLT) != 0:
		return a, errExpireNX
	case a.flags&expireGT != 0 && a.flags&expireLT != 0:
		return a, errExpireGTLT
	}
	n, ok := string2ll(args[2])
	if !ok {
		return a, errNotInteger
	}
	per := int64(unit / time.Millisecond)
	// Redis 7.0's range (expireGenericCommand): seconds within
	// LLONG_MIN/1000..LLONG_MAX/1000, and a deadline that fits in int64.
	if n > math.MaxInt64/per || n < math.MinInt64/per || n*per > math.MaxInt64-time.Now().UnixMilli() {
		return a, invalidExpire(cmd)
	}
	a.ttl = min(n*per, maxLegacyTTL)
	var err error
	a.key, err = l.key(args[1])
	return a, err
}

// upper is b in upper case, for matching options.
func upper(b []byte) string { return strings.ToUpper(string(b)) }

// allows reports whether the EXPIRE options let a new TTL of ttl ms
// replace current: -1 for a lock without a TTL, which counts as infinite.
func (f expireFlag) allows(current, ttl int64) bool {
	switch {
	case f&expireNX != 0:
		return current == -1
	case f&expireXX != 0 && current == -1:
		return false
	case f&expireGT != 0:
		return current != -1 && ttl > current
	case f&expireLT != 0:
		return current == -1 || ttl < current
	}
	return true
}
