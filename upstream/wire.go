package upstream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The RESP2 that a node connection (conn.go) speaks: commands go out as
// arrays of bulk strings, and replies are read into the values go-redis
// gives for them (reply.go and eval.go decode those): a status or bulk
// string is a string, an integer an int64, an array an []any, a nested
// error a value of type replyError and a nested null nil; a top-level
// error reply is a replyError and a top-level null is redis.Nil.

// replyError is an error reply of the node. It is a redis.Error, so that
// redis.HasErrorPrefix and errors.As(err, &redis.Error) read it as they
// read go-redis's.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as a redis.Error.
func (replyError) RedisError() {}

var _ redis.Error = replyError("")

// Bounds of what a reply may claim before its bytes arrive: Redis's own
// proto-max-bulk-len, and a nesting depth no script reply comes near (a
// deeper one is a broken stream, not a reply to read on a small stack).
const (
	maxBulk  = 512 << 20
	maxDepth = 1000
)

// errProtocol is a reply that is not RESP2: the stream is broken.
var errProtocol = errors.New("upstream: node sent a malformed reply")

// respReader reads replies from a node's stream.
type respReader struct{ rd *bufio.Reader }

func newRespReader(r io.Reader) respReader {
	return respReader{rd: bufio.NewReaderSize(r, 16<<10)}
}

// reply reads one reply: its value, the node's error reply or redis.Nil as
// reply, or the error that broke the stream as err (after which nothing
// more can be read).
func (r respReader) reply() (v any, reply error, err error) {
	v, null, err := r.value(0)
	switch {
	case err != nil:
		return nil, nil, err
	case null:
		return nil, redis.Nil, nil
	}
	if e, ok := v.(replyError); ok {
		return nil, e, nil
	}
	return v, nil, nil
}

// value reads one value; null reports a null bulk string or array.
func (r respReader) value(depth int) (v any, null bool, err error) {
	line, err := r.line()
	if err != nil {
		return nil, false, err
	}
	if len(line) == 0 {
		return nil, false, fmt.Errorf("%w: empty line", errProtocol)
	}
	switch line[0] {
	case '+':
		return string(line[1:]), false, nil
	case '-':
		return replyError(line[1:]), false, nil
	case ':':
		i, err := parseInt(line[1:])
		return i, false, err
	case '$':
		n, err := parseLen(line[1:], maxBulk)
		if err != nil || n < 0 {
			return nil, n < 0, err
		}
		s, err := r.bulk(n)
		return s, false, err
	case '*':
		n, err := parseLen(line[1:], maxBulk)
		if err != nil || n < 0 {
			return nil, n < 0, err
		}
		if depth >= maxDepth {
			return nil, false, fmt.Errorf("%w: arrays nested deeper than %d", errProtocol, maxDepth)
		}
		a := make([]any, 0, min(n, 64))
		for range n {
			e, _, err := r.value(depth + 1) // a nested null is nil
			if err != nil {
				return nil, false, err
			}
			a = append(a, e)
		}
		return a, false, nil
	}
	return nil, false, fmt.Errorf("%w: type %q", errProtocol, line[0])
}

// line reads one line without its CRLF. It is valid until the next read.
func (r respReader) line() ([]byte, error) {
	b, err := r.rd.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) { // a long status or error line
		long := append([]byte(nil), b...)
		for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxBulk {
			b, err = r.rd.ReadSlice('\n')
			long = append(long, b...)
		}
		b = long
	}
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[len(b)-2] != '\r' {
		return nil, fmt.Errorf("%w: line without CRLF", errProtocol)
	}
	return b[:len(b)-2], nil
}

// bulk reads a bulk string's n bytes and its CRLF.
func (r respReader) bulk(n int) (string, error) {
	if p, err := r.rd.Peek(n + 2); err == nil {
		if p[n] != '\r' || p[n+1] != '\n' {
			return "", fmt.Errorf("%w: bulk string without CRLF", errProtocol)
		}
		s := string(p[:n])
		_, _ = r.rd.Discard(n + 2)
		return s, nil
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r.rd, b); err != nil {
		return "", err
	}
	if b[n] != '\r' || b[n+1] != '\n' {
		return "", fmt.Errorf("%w: bulk string without CRLF", errProtocol)
	}
	return string(b[:n]), nil
}

// parseInt parses a RESP integer (an optional minus and 1 to 19 digits,
// within int64) without allocating.
func parseInt(b []byte) (int64, error) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, fmt.Errorf("%w: integer %q", errProtocol, b)
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: integer %q", errProtocol, b)
		}
		u = u*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	switch {
	case neg && u <= 1<<63:
		return -int64(u), nil
	case !neg && u < 1<<63:
		return int64(u), nil
	}
	return 0, fmt.Errorf("%w: integer %q out of range", errProtocol, b)
}

// parseLen parses the length of a bulk string or an array: -1 (null) to
// max.
func parseLen(b []byte, max int) (int, error) {
	i, err := parseInt(b)
	if err != nil || i < -1 || i > int64(max) {
		return 0, fmt.Errorf("%w: length %q", errProtocol, b)
	}
	return int(i), nil
}

// appendCommand appends the command name args... to b as RESP.
func appendCommand(b []byte, args ...string) []byte {
	b = appendHeader(b, '*', len(args))
	for _, a := range args {
		b = appendBulk(b, a)
	}
	return b
}

// appendScript appends EVALSHA (or EVAL with source) of s with keys and
// args to b as RESP.
func appendScript(b []byte, s *script, source bool, keys []string, args []any) []byte {
	b = appendHeader(b, '*', 3+len(keys)+len(args))
	if source {
		b = appendBulk(appendBulk(b, "EVAL"), s.src)
	} else {
		b = appendBulk(appendBulk(b, "EVALSHA"), s.sha)
	}
	b = appendHeader(b, '$', digits(len(keys)))
	b = append(strconv.AppendInt(b, int64(len(keys)), 10), '\r', '\n')
	for _, k := range keys {
		b = appendBulk(b, k)
	}
	for _, a := range args {
		b = appendArg(b, a)
	}
	return b
}

// appendArg appends a script argument as go-redis writes it.
func appendArg(b []byte, a any) []byte {
	var scratch [32]byte
	var v []byte
	switch a := a.(type) {
	case string:
		return appendBulk(b, a)
	case []byte:
		v = a
	case int64:
		v = strconv.AppendInt(scratch[:0], a, 10)
	case int:
		v = strconv.AppendInt(scratch[:0], int64(a), 10)
	case uint64:
		v = strconv.AppendUint(scratch[:0], a, 10)
	case float64:
		v = strconv.AppendFloat(scratch[:0], a, 'f', -1, 64)
	case bool:
		v = []byte{'0'}
		if a {
			v[0] = '1'
		}
	case nil:
	default:
		v = fmt.Append(nil, a)
	}
	b = appendHeader(b, '$', len(v))
	return append(append(b, v...), '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = appendHeader(b, '$', len(s))
	return append(append(b, s...), '\r', '\n')
}

func appendHeader(b []byte, kind byte, n int) []byte {
	return append(strconv.AppendInt(append(b, kind), int64(n), 10), '\r', '\n')
}

// digits is the length of n in decimal.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}
