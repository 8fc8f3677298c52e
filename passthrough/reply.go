package passthrough

import (
	"bufio"
	"errors"
	"strconv"
)

// Bounds of one relayed reply, so that a broken or hostile upstream cannot
// make lockproxy allocate without end.
const (
	maxBulk     = 512 << 20 // bytes of one bulk string, as Redis's proto-max-bulk-len
	maxElements = 1 << 24   // elements of one aggregate
	maxDepth    = 64        // nesting of aggregates
)

// errProtocol is a reply that is not RESP2 or RESP3.
var errProtocol = errors.New("protocol error in the data Redis's reply")

// readReply appends exactly one RESP2 or RESP3 reply read from r to dst,
// byte for byte, and returns it. An attribute (|) is kept with the reply it
// precedes.
func readReply(r *bufio.Reader, dst []byte) ([]byte, error) {
	return readValue(r, dst, 0)
}

func readValue(r *bufio.Reader, dst []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, errProtocol
	}
	start := len(dst)
	dst, err := readLine(r, dst)
	if err != nil {
		return dst, err
	}
	line := dst[start : len(dst)-2]
	if len(line) == 0 {
		return dst, errProtocol
	}
	switch line[0] {
	case '+', '-', ':', '_', '#', ',', '(':
		return dst, nil
	case '$', '!', '=':
		return readBulk(r, dst, line[1:])
	case '*', '~', '>':
		return readElements(r, dst, line[1:], 1, depth)
	case '%':
		return readElements(r, dst, line[1:], 2, depth)
	case '|': // attribute: pairs, then the reply it describes
		if dst, err = readElements(r, dst, line[1:], 2, depth); err != nil {
			return dst, err
		}
		return readValue(r, dst, depth+1)
	}
	return dst, errProtocol
}

// readLine appends one line, CRLF included.
func readLine(r *bufio.Reader, dst []byte) ([]byte, error) {
	for {
		chunk, err := r.ReadSlice('\n')
		dst = append(dst, chunk...)
		if err == bufio.ErrBufferFull {
			if len(dst) > 64<<10 {
				return dst, errProtocol
			}
			continue
		}
		if err != nil {
			return dst, err
		}
		if len(dst) < 2 || dst[len(dst)-2] != '\r' {
			return dst, errProtocol
		}
		return dst, nil
	}
}

func readBulk(r *bufio.Reader, dst, size []byte) ([]byte, error) {
	n, err := strconv.Atoi(string(size))
	if err != nil || n < -1 || n > maxBulk {
		return dst, errProtocol
	}
	if n == -1 {
		return dst, nil
	}
	start := len(dst)
	dst = append(dst, make([]byte, n+2)...)
	if _, err := readFull(r, dst[start:]); err != nil {
		return dst, err
	}
	if dst[len(dst)-2] != '\r' || dst[len(dst)-1] != '\n' {
		return dst, errProtocol
	}
	return dst, nil
}

func readElements(r *bufio.Reader, dst, count []byte, per, depth int) ([]byte, error) {
	n, err := strconv.Atoi(string(count))
	if err != nil || n < -1 || n > maxElements {
		return dst, errProtocol
	}
	for i := 0; i < n*per; i++ {
		if dst, err = readValue(r, dst, depth+1); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func readFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
