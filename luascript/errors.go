package luascript

import "strconv"

// ArgError is an error Redis would have raised while running the script on
// the same arguments (a non-integer TTL, a missing KEYS[1], ...). Its text is
// Redis's, without the " script: <sha>, on @user_script:<line>." suffix Redis
// appends; the caller replies with it as a RESP error.
type ArgError string

func (e ArgError) Error() string { return string(e) }

// The errors Redis commands raise inside the known scripts.
const (
	errLuaArg   ArgError = "ERR Lua redis lib command arguments must be strings or integers"
	errNotInt   ArgError = "ERR value is not an integer or out of range"
	errArity    ArgError = "ERR Wrong number of args calling Redis command from script"
	errSetTime  ArgError = "ERR invalid expire time in 'set' command"
	errPExpTime ArgError = "ERR invalid expire time in 'pexpire' command"
)

// Lua runtime errors: Redis prefixes them with "user_script:<line>:"; the
// line depends on the exact source, so these carry no line number.
const (
	errArithNil ArgError = "ERR user_script: attempt to perform arithmetic on a nil value"
	errArithStr ArgError = "ERR user_script: attempt to perform arithmetic on a string value"
)

// unknownMsg is the reply to EVAL or SCRIPT LOAD of a script lockproxy does
// not know.
const unknownMsg = "ERR lockproxy runs only known lock scripts; this one is not recognised (supported scripts: docs/lock-scripts.md)"

// UnknownError is returned by Recognize for a script that is not in the
// catalog. Unwrap gives the *LexError when the source did not even lex.
type UnknownError struct {
	err error
}

func (e *UnknownError) Error() string { return unknownMsg }

func (e *UnknownError) Unwrap() error { return e.err }

// LexError is a Lua syntax error found by Normalize, with its byte offset.
type LexError struct {
	Offset int
	Msg    string
}

func (e *LexError) Error() string {
	return "luascript: offset " + strconv.Itoa(e.Offset) + ": " + e.Msg
}
