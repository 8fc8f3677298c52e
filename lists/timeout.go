package lists

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// Redis's errors for a blocking command's timeout.
var (
	errTimeoutNotFloat = errors.New("ERR timeout is not a float or out of range")
	errTimeoutNegative = errors.New("ERR timeout is negative")
	errTimeoutRange    = errors.New("ERR timeout is out of range")
)

// maxTimeout is the longest timeout honoured as given; a longer one waits
// forever (as 0 does), which no caller can tell apart.
const maxTimeout = 100 * 365 * 24 * time.Hour

// parseTimeout reads a blocking command's timeout in seconds, fractions
// allowed, as Redis does: 0 is forever (returned as 0), a negative one and
// one that is not a finite number are errors. The result is rounded up to
// a whole millisecond.
func parseTimeout(arg []byte) (time.Duration, error) {
	s := string(arg)
	if s == "" || s[0] == ' ' || s[0] == '\t' {
		return 0, errTimeoutNotFloat
	}
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case errors.Is(err, strconv.ErrRange): // ±huge (within Redis's long double) or tiny
	case err != nil || math.IsNaN(v):
		return 0, errTimeoutNotFloat
	}
	ms := math.Ceil(v * 1000)
	switch {
	case ms >= math.MaxInt64 || ms < 0:
		// Redis 7.0 casts a timeout beyond a long long of ms to a
		// negative one: "inf" and "1e400" are "negative" there too.
		return 0, errTimeoutNegative
	case ms > float64(math.MaxInt64-time.Now().UnixMilli()):
		return 0, errTimeoutRange
	case ms == 0:
		return 0, nil
	}
	d := time.Duration(ms) * time.Millisecond
	if ms > float64(maxTimeout/time.Millisecond) {
		return 0, nil
	}
	return d, nil
}
