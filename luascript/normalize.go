package luascript

import (
	"bytes"
	"strconv"
	"strings"
)

// Token kinds of the Lua 5.1 lexer (Redis embeds Lua 5.1).
const (
	tkEOF = iota
	tkName
	tkString
	tkNumber
	tkOp
)

// Normalize returns the canonical form of a Lua source: its tokens, one space
// apart, with comments and whitespace removed; every string literal re-quoted
// as "..." with \ddd escapes (so 'x', "x", [[x]] and "\120" compare equal);
// every number written as its value ("0x10", "16" and "16.0" compare equal);
// and the first argument of redis.call/redis.pcall lower-cased when it is a
// string literal (Redis command names are case-insensitive).
//
// It follows the Lua 5.1 lexer and errors where that lexer errors (unfinished
// strings and long comments, malformed numbers, bad escapes). It runs in time
// linear in len(src) and never panics. Its output, when it succeeds, is
// itself a Lua token stream that normalises to itself.
func Normalize(src []byte) (string, error) {
	lx := lexer{src: src}
	var out strings.Builder
	var last [4]string // the previous tokens, newest last
	for {
		kind, text, err := lx.next()
		if err != nil {
			return "", err
		}
		if kind == tkEOF {
			return out.String(), nil
		}
		if kind == tkString && isCommandPosition(last) {
			text = strings.ToLower(text) // quoted form: escapes are digits, unaffected
		}
		if out.Len() > 0 {
			out.WriteByte(' ')
		}
		out.WriteString(text)
		last = [4]string{last[1], last[2], last[3], text}
	}
}

// isCommandPosition reports whether the next token is the first argument of
// redis.call( or redis.pcall(.
func isCommandPosition(last [4]string) bool {
	return last[0] == "redis" && last[1] == "." &&
		(last[2] == "call" || last[2] == "pcall") && last[3] == "("
}

type lexer struct {
	src []byte
	pos int
}

func (lx *lexer) errorf(msg string) error { return &LexError{Offset: lx.pos, Msg: msg} }

func (lx *lexer) peek(n int) byte {
	if lx.pos+n < len(lx.src) {
		return lx.src[lx.pos+n]
	}
	return 0
}

// next returns the next token and its canonical text.
func (lx *lexer) next() (int, string, error) {
	for lx.pos < len(lx.src) {
		c := lx.src[lx.pos]
		switch {
		case isSpace(c):
			lx.pos++
		case c == '-' && lx.peek(1) == '-':
			if err := lx.comment(); err != nil {
				return 0, "", err
			}
		case c == '[':
			return lx.bracket()
		case c == '"' || c == '\'':
			s, err := lx.shortString(c)
			return tkString, s, err
		case isDigit(c) || c == '.' && isDigit(lx.peek(1)):
			return lx.number()
		case isAlpha(c) || c == '_':
			return tkName, lx.name(), nil
		default:
			return tkOp, lx.op(), nil
		}
	}
	return tkEOF, "", nil
}

// comment skips a -- comment: a long one when a long bracket follows, else
// the rest of the line.
func (lx *lexer) comment() error {
	lx.pos += 2
	if level := lx.openLevel(); level >= 0 {
		_, err := lx.longBody(level, "unfinished long comment")
		return err
	}
	for lx.pos < len(lx.src) && lx.src[lx.pos] != '\n' && lx.src[lx.pos] != '\r' {
		lx.pos++
	}
	return nil
}

// openLevel returns the level of the long bracket [==[ at pos, or -1 when
// there is none, leaving pos after it when there is one.
func (lx *lexer) openLevel() int {
	if lx.peek(0) != '[' {
		return -1
	}
	n := 1
	for lx.peek(n) == '=' {
		n++
	}
	if lx.peek(n) != '[' {
		return -1
	}
	lx.pos += n + 1
	return n - 1
}

// bracket lexes a long string or the '[' operator.
func (lx *lexer) bracket() (int, string, error) {
	if level := lx.openLevel(); level >= 0 {
		s, err := lx.longBody(level, "unfinished long string")
		return tkString, quote(s), err
	}
	if lx.peek(1) == '=' {
		return 0, "", lx.errorf("invalid long string delimiter")
	}
	lx.pos++
	return tkOp, "[", nil
}

// longBody reads a long string's body after its opening bracket, as Redis's
// Lua 5.1 does: a first newline is dropped, any newline sequence becomes
// "\n", and an inner "[[" is plain text (Redis builds Lua without
// LUA_COMPAT_LSTR).
func (lx *lexer) longBody(level int, unfinished string) ([]byte, error) {
	if c := lx.peek(0); c == '\n' || c == '\r' {
		lx.skipNewline()
	}
	closer := "]" + strings.Repeat("=", level) + "]"
	rest := lx.src[lx.pos:]
	end := bytes.Index(rest, []byte(closer))
	if end < 0 {
		lx.pos = len(lx.src)
		return nil, lx.errorf(unfinished)
	}
	lx.pos += end + len(closer)
	return canonicalNewlines(rest[:end]), nil
}

// canonicalNewlines turns \r\n, \n\r and \r into \n, as Lua's long strings do.
func canonicalNewlines(b []byte) []byte {
	if bytes.IndexByte(b, '\r') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\n' && c != '\r' {
			out = append(out, c)
			continue
		}
		out = append(out, '\n')
		if i+1 < len(b) && (b[i+1] == '\n' || b[i+1] == '\r') && b[i+1] != c {
			i++
		}
	}
	return out
}

// skipNewline skips one newline sequence: \n, \r, \r\n or \n\r.
func (lx *lexer) skipNewline() {
	c := lx.src[lx.pos]
	lx.pos++
	if n := lx.peek(0); (n == '\n' || n == '\r') && n != c {
		lx.pos++
	}
}

// shortString reads a '...' or "..." literal with Lua 5.1's escapes.
func (lx *lexer) shortString(delim byte) (string, error) {
	lx.pos++
	var val []byte
	for {
		if lx.pos >= len(lx.src) {
			return "", lx.errorf("unfinished string")
		}
		c := lx.src[lx.pos]
		switch {
		case c == delim:
			lx.pos++
			return quote(val), nil
		case c == '\n' || c == '\r':
			return "", lx.errorf("unfinished string")
		case c == '\\':
			lx.pos++
			b, err := lx.escape()
			if err != nil {
				return "", err
			}
			val = append(val, b...)
		default:
			val = append(val, c)
			lx.pos++
		}
	}
}

// escape reads the escape sequence after a backslash and returns its bytes.
func (lx *lexer) escape() ([]byte, error) {
	if lx.pos >= len(lx.src) {
		return nil, nil // "unfinished string" follows
	}
	c := lx.src[lx.pos]
	if e, ok := simpleEscapes[c]; ok {
		lx.pos++
		return []byte{e}, nil
	}
	switch {
	case c == '\n' || c == '\r':
		lx.skipNewline()
		return []byte{'\n'}, nil
	case isDigit(c):
		return lx.decimalEscape()
	default:
		lx.pos++
		return []byte{c}, nil // \\, \", \' and any other character stand for themselves
	}
}

var simpleEscapes = map[byte]byte{'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v'}

// decimalEscape reads \ddd: up to three digits, at most 255.
func (lx *lexer) decimalEscape() ([]byte, error) {
	v := 0
	for i := 0; i < 3 && isDigit(lx.peek(0)); i++ {
		v = v*10 + int(lx.src[lx.pos]-'0')
		lx.pos++
	}
	if v > 255 {
		return nil, lx.errorf("escape sequence too large")
	}
	return []byte{byte(v)}, nil
}

// number reads a numeral as Lua 5.1's read_numeral does and returns its value
// in canonical form.
func (lx *lexer) number() (int, string, error) {
	start := lx.pos
	for isDigit(lx.peek(0)) || lx.peek(0) == '.' {
		lx.pos++
	}
	if c := lx.peek(0); c == 'e' || c == 'E' {
		lx.pos++
		if c := lx.peek(0); c == '+' || c == '-' {
			lx.pos++
		}
	}
	for isAlnum(lx.peek(0)) || lx.peek(0) == '_' {
		lx.pos++
	}
	v, ok := luaStrToNumber(string(lx.src[start:lx.pos]))
	if !ok {
		return 0, "", lx.errorf("malformed number")
	}
	return tkNumber, formatNumber(v), nil
}

// formatNumber writes v as a Lua numeral that reads back as v.
func formatNumber(v float64) string {
	if v > maxFloat {
		return "1e999"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

const maxFloat = 1.7976931348623157e308

func (lx *lexer) name() string {
	start := lx.pos
	for isAlnum(lx.peek(0)) || lx.peek(0) == '_' {
		lx.pos++
	}
	return string(lx.src[start:lx.pos])
}

// op reads an operator or any other single character.
func (lx *lexer) op() string {
	c := lx.src[lx.pos]
	switch {
	case c == '.' && lx.peek(1) == '.' && lx.peek(2) == '.':
		lx.pos += 3
		return "..."
	case c == '.' && lx.peek(1) == '.':
		lx.pos += 2
		return ".."
	case strings.IndexByte("=<>~", c) >= 0 && lx.peek(1) == '=':
		lx.pos += 2
		return string([]byte{c, '='})
	}
	lx.pos++
	return string([]byte{c})
}

// quote writes a string value in canonical form: "..." with printable ASCII
// kept, \" and \\ escaped, and every other byte as a three-digit \ddd.
func quote(val []byte) string {
	var b strings.Builder
	b.Grow(len(val) + 2)
	b.WriteByte('"')
	for _, c := range val {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			b.WriteByte('\\')
			b.WriteByte('0' + c/100)
			b.WriteByte('0' + c/10%10)
			b.WriteByte('0' + c%10)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// The C-locale character classes Lua's lexer uses.
func isSpace(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isAlnum(c byte) bool { return isAlpha(c) || isDigit(c) }
