package luascript

import (
	"math"
	"strconv"
	"strings"
)

// This file reproduces the few value conversions of Lua 5.1 and Redis that
// the known scripts depend on, so Run fails and succeeds where Redis does.

// luaStrToNumber converts s as Lua 5.1's luaO_str2d does with glibc's strtod:
// the C string (up to a NUL) must be one decimal or hexadecimal number, inf
// or nan, with optional sign and surrounding whitespace.
func luaStrToNumber(s string) (float64, bool) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	v, n := strtod(s)
	if n == 0 {
		return 0, false
	}
	for _, c := range []byte(s[n:]) {
		if !isSpace(c) {
			return 0, false
		}
	}
	return v, true
}

// strtod parses the longest prefix of s that C's strtod accepts and returns
// its value and length; length 0 means no conversion.
func strtod(s string) (float64, int) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	var n int
	var text string
	if len(s)-i >= 2 && s[i] == '0' && s[i+1]|0x20 == 'x' {
		text, n = hexFloat(s[i:])
	}
	if n == 0 {
		text, n = decimalFloat(s[i:])
	}
	if n == 0 {
		text, n = infNaN(s[i:])
	}
	if n == 0 {
		return 0, 0
	}
	if text == "nan" {
		return math.NaN(), i + n
	}
	v, _ := strconv.ParseFloat(s[start:i]+text, 64) // ±Inf on overflow, as strtod
	return v, i + n
}

// decimalFloat matches digits [. digits] [e [sign] digits] with at least one digit.
func decimalFloat(s string) (string, int) {
	i := digitsEnd(s, 0, isDigit)
	mant := i
	if i < len(s) && s[i] == '.' {
		i = digitsEnd(s, i+1, isDigit)
	}
	if mant == 0 && i <= 1 {
		return "", 0
	}
	return s[:expEnd(s, i, 'e')], expEnd(s, i, 'e')
}

// hexFloat matches 0x hexdigits [. hexdigits] [p [sign] digits] with at
// least one hex digit, rewritten for strconv.ParseFloat.
func hexFloat(s string) (string, int) {
	i := digitsEnd(s, 2, isHexDigit)
	mant := i
	if i < len(s) && s[i] == '.' {
		i = digitsEnd(s, i+1, isHexDigit)
	}
	if mant == 2 && i <= 3 {
		return "", 0
	}
	end := expEnd(s, i, 'p')
	text := s[:end]
	if end == i {
		text += "p0"
	}
	if strings.HasSuffix(s[:i], ".") {
		text = strings.Replace(text, ".", "", 1) // "0x1." -> "0x1p0"
	}
	return text, end
}

func infNaN(s string) (string, int) {
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "infinity"):
		return "inf", 8
	case strings.HasPrefix(lower, "inf"):
		return "inf", 3
	case strings.HasPrefix(lower, "nan"):
		n := 3
		if close := strings.IndexByte(lower[3:], ')'); strings.HasPrefix(lower[3:], "(") && close > 0 &&
			strings.Trim(lower[4:3+close], "abcdefghijklmnopqrstuvwxyz0123456789_") == "" {
			n = 4 + close
		}
		return "nan", n
	}
	return "", 0
}

func digitsEnd(s string, i int, class func(byte) bool) int {
	for i < len(s) && class(s[i]) {
		i++
	}
	return i
}

// expEnd returns the end of an exponent (e or p, optional sign, digits)
// starting at i, or i when there is none.
func expEnd(s string, i int, e byte) int {
	if i >= len(s) || s[i]|0x20 != e {
		return i
	}
	j := i + 1
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		j++
	}
	if k := digitsEnd(s, j, isDigit); k > j {
		return k
	}
	return i
}

func isHexDigit(c byte) bool { return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }

// string2ll parses s as Redis's string2ll: an optional '-', then digits with
// no leading zero (or exactly "0"), fitting in int64, shorter than 21 bytes.
func string2ll(s string) (int64, bool) {
	if s == "0" {
		return 0, true
	}
	if len(s) == 0 || len(s) >= 21 {
		return 0, false
	}
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || digits[0] < '1' || digits[0] > '9' || digitsEnd(digits, 0, isDigit) != len(digits) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// redisArg is how Redis turns a Lua number passed to redis.call into a
// command argument: "%.17g".
func redisArg(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'g', 17, 64)
}

// getRange is Redis 7.0's GETRANGE on a string value (the empty string for a
// missing key).
func getRange(val string, start, end int64) string {
	n := int64(len(val))
	if start < 0 && end < 0 && start > end {
		return ""
	}
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	start, end = max(start, 0), max(end, 0)
	if end >= n {
		end = n - 1
	}
	if start > end || n == 0 {
		return ""
	}
	return val[start : end+1]
}

// strSub is Lua 5.1's string.sub(s, i, j) with integer i and j.
func strSub(s string, i, j int64) string {
	n := int64(len(s))
	rel := func(p int64) int64 {
		if p < 0 {
			p += n + 1
		}
		return max(p, 0)
	}
	i, j = max(rel(i), 1), min(rel(j), n)
	if i > j {
		return ""
	}
	return s[i-1 : j]
}
