package luascript

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

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

// EvalError is the failure of a script run on every node (quorum.Eval):
// no majority of them gave the same reply.
type EvalError struct {
	Nodes, Needed int
	Answered      int // nodes that replied (an error reply counts)
	Agreeing      int // the largest number of nodes that gave one reply
	TimedOut      int // nodes that did not finish within the time limit
	Limit         time.Duration
	// Turn, when not empty, says that the script did not run, because the
	// turn on its keys could not be taken on a majority of nodes within
	// the time limit, and why (quorum/turn.go).
	Turn string
	// Read is true for a script that only reads (Admitted.Writes false):
	// it changed no node, and the error says so.
	Read bool
	Err  error // the nodes' failures, joined
}

func (e *EvalError) Error() string {
	var b strings.Builder
	if e.Turn != "" {
		what := "the script ran on no node"
		if e.Read {
			what = "this script only reads: it changed no node, and its first run's replies disagreed"
		}
		fmt.Fprintf(&b, "could not take the turn on the script's keys on a majority of nodes (%d of %d) within the script time limit (%d ms); "+
			"%s; %s", e.Needed, e.Nodes, e.Limit.Milliseconds(), what, e.Turn)
		return b.String()
	}
	if e.Answered < e.Needed {
		fmt.Fprintf(&b, "%d of %d nodes answered, %d needed", e.Answered, e.Nodes, e.Needed)
	} else {
		fmt.Fprintf(&b, "the nodes disagreed: at most %d of %d gave the same reply, %d needed", e.Agreeing, e.Nodes, e.Needed)
	}
	if e.TimedOut > 0 {
		fmt.Fprintf(&b, "; %d did not finish within the script time limit (%d ms) and were sent SCRIPT KILL", e.TimedOut, e.Limit.Milliseconds())
	}
	if e.Read {
		b.WriteString("; this script only reads: it changed no node, and the nodes whose states differed without a majority were not repaired")
	} else {
		b.WriteString("; the script may have run on some nodes, and its writes there are not undone")
	}
	return b.String()
}

func (e *EvalError) Unwrap() error { return e.Err }
