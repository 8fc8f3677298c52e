package resp

import (
	"errors"
	"fmt"
)

// Errors a guarded connection's Read returns. The limit errors come wrapped in a *LimitError.
var (
	ErrBulkTooLong      = errors.New("resp: bulk string longer than the limit")
	ErrTooManyArgs      = errors.New("resp: more arguments than the limit")
	ErrInlineTooLong    = errors.New("resp: inline command longer than the limit")
	ErrRequestTooLarge  = errors.New("resp: request larger than the limit")
	ErrHeaderTooLong    = errors.New("resp: length header longer than the limit")
	ErrBufferedTooMuch  = errors.New("resp: bytes buffered for all clients over the limit")
	ErrMalformedRequest = errors.New("resp: malformed request")
)

// LimitError says which limit a client broke. Got is what the guard had seen
// when the limit was crossed: it reads no further, so a length of 100000000
// against a limit of 1048576 shows as 10000000, and the client asked for at
// least Got. For a negative length Got is its magnitude.
type LimitError struct {
	Err   error // ErrBulkTooLong, ErrTooManyArgs, ErrInlineTooLong, ErrRequestTooLarge, ErrHeaderTooLong or ErrBufferedTooMuch
	Limit int   // the limit in force
	Got   int
}

func (e *LimitError) Error() string { return fmt.Sprintf("%v: %d > %d", e.Err, e.Got, e.Limit) }
func (e *LimitError) Unwrap() error { return e.Err }

// Redis's own texts for handshake errors that more than one command gives.
const (
	msgWrongPass     = "WRONGPASS invalid username-password pair or user is disabled."
	msgBadClientName = "ERR Client names cannot contain spaces, newlines or special characters."
)
