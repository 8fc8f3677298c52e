package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/resp"
)

// argError is a bad argument; its text is the reply, in Redis's words
// where Redis has them.
type argError string

func (e argError) Error() string { return string(e) }

// Argument errors.
var (
	errSyntax     error = argError("ERR syntax error")
	errNotInteger error = argError("ERR value is not an integer or out of range")
	errEmptyKey   error = argError("ERR invalid key: empty")
	errEmptyToken error = argError("ERR invalid token: empty")
)

// invalidExpire is Redis's error for a TTL that is not positive or overflows.
func invalidExpire(cmd string) error {
	return argError(fmt.Sprintf("ERR invalid expire time in '%s' command", cmd))
}

// tooLong rejects an argument over its configured limit.
func tooLong(what string, limit int) error {
	return argError(fmt.Sprintf("ERR invalid %s: longer than %d bytes (max_%s_bytes)", what, limit, what))
}

// noQuorumOutcome says what a NOQUORUM leaves behind, by operation.
var noQuorumOutcome = map[string]string{
	"acquire": "the lock was not granted",
	"extend":  "the lease was not renewed",
	"release": "the lock may stay held until its lease expires",
	"inspect": "the holder is unknown",
}

// unknownOutcome says what an undecided operation leaves behind, by operation.
var unknownOutcome = map[string]string{
	"acquire": "the lock may have been granted to that token; retry LOCK with the same TOKEN, or UNLOCK it",
	"extend":  "the lease may not be renewed, and the lock was not seen lost; retry RENEW",
	"release": "the lock may still be held; the release is retried on the silent nodes, and UNLOCK may be retried",
}

// replyError is the RESP error line for err: the one place where domain
// errors become client-visible text.
func replyError(key string, err error) string {
	var nq *engine.NoQuorumError
	var arg argError
	var scriptArg luascript.ArgError
	var unknownScript *luascript.UnknownError
	var refused *luascript.AdmitError
	var nodes *luascript.EvalError
	var unknown *engine.UnknownOutcomeError
	var lost *engine.LostError
	switch {
	case errors.As(err, &arg):
		return arg.Error()
	case errors.As(err, &scriptArg), errors.As(err, &unknownScript), errors.As(err, &refused):
		return err.Error() // Redis's words for a script's error, or the catalog's refusal
	case errors.As(err, &nodes):
		return "NOQUORUM " + nodes.Error() + failedNodes(joined(nodes.Err))
	case errors.As(err, &nq):
		return fmt.Sprintf("NOQUORUM %d of %d nodes answered, %d needed; %s%s%s", nq.Answered, nq.Nodes, nq.Needed, noQuorumOutcome[nq.Op], failedNodes(nq.Failed), hint(nq.Hint))
	case errors.As(err, &unknown):
		return fmt.Sprintf("TIMEOUT outcome unknown: %d of %d nodes held the lock for that token, %d did not, %d did not answer; %s",
			unknown.Yes, unknown.Yes+unknown.No+unknown.Silent, unknown.No, unknown.Silent, unknownOutcome[unknown.Op])
	case errors.As(err, &lost):
		return "LOCKLOST the lock on '" + oneLine(resp.ClientKey(key)) + "' was lost: " + lostWhy[lost.Reason] + "; another client may hold it now"
	case errors.Is(err, engine.ErrLost):
		return "LOCKLOST the lock on '" + oneLine(resp.ClientKey(key)) + "' was lost; another client may hold it now"
	case errors.Is(err, engine.ErrUnavailable):
		return "UNAVAILABLE the lock backend cannot be reached right now; nothing was granted, try again: " + err.Error()
	case errors.Is(err, engine.ErrShuttingDown):
		return "ERR lockproxy is shutting down"
	case errors.Is(err, engine.ErrTooManyWaiters):
		return "ERR max number of waiters reached (limits.max_waiters)"
	case errors.Is(err, context.DeadlineExceeded):
		return "TIMEOUT the lock backend did not answer in time; nothing was granted"
	default:
		return "ERR " + err.Error()
	}
}

// lostWhy says why a lock was lost, by engine reason.
var lostWhy = map[string]string{
	engine.LostDeleted:     "another connection deleted it",
	engine.LostGone:        "a renewal found it gone (deleted through another instance, or expired)",
	engine.LostRenewal:     "renewals failed until its validity ran out",
	engine.LostSession:     "its ZooKeeper session expired",
	engine.LostClockJumped: "the wall clock of a Redis node it relied on jumped, and fewer than a majority of the nodes that count still hold it",
}

// oneLine replaces the bytes that would end a RESP error line.
func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

// unknownSubcommand is Redis's error for a subcommand cmd does not have.
func unknownSubcommand(cmd string, sub []byte) error {
	return argError("ERR unknown subcommand '" + strings.ReplaceAll(string(sub), "\n", " ") + "'. Try " + cmd + " HELP.")
}

// noDigests refuses DELEX's digest conditions: lockproxy compares tokens.
func noDigests(cond string) error {
	return argError("ERR lockproxy does not compare digests (" + cond + "); use IFEQ with the token")
}

// Script argument errors, in Redis's words.
var (
	errNoScript         error = argError("NOSCRIPT No matching script. Please use EVAL.")
	errNegativeKeys     error = argError("ERR Number of keys can't be negative")
	errTooManyKeys      error = argError("ERR Number of keys can't be greater than number of args")
	errFlushOption      error = argError("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
	errScriptLoadArgs   error = argError("ERR wrong number of arguments for 'script|load' command")
	errScriptExistsArgs error = argError("ERR wrong number of arguments for 'script|exists' command")
)

// failedNodes lists the nodes a NOQUORUM heard nothing from, and why, on one
// line (a RESP error may not hold a newline).
func failedNodes(failed []string) string {
	if len(failed) == 0 {
		return ""
	}
	return "; no answer from " + strings.NewReplacer("\r", " ", "\n", " ").Replace(strings.Join(failed, ", "))
}

// hint is "; hint" for a hint that is not empty, on one line.
func hint(h string) string {
	if h == "" {
		return ""
	}
	return "; " + oneLine(h)
}

// errTimeoutRange is Redis's error for a negative blocking timeout.
var errTimeoutRange error = argError("ERR timeout is negative")

// joined lists the errors errors.Join put together (none for nil).
func joined(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}
