package commands

import (
	"github.com/lockproxy/lockproxy/resp"
	"math"
	"strconv"
	"strings"
	"time"
)

// Limits bound lock command arguments.
type Limits struct {
	MaxKeyBytes   int // longest key (default 1024)
	MaxTokenBytes int // longest client-chosen token (default 256)
}

func (l Limits) withDefaults() Limits {
	if l.MaxKeyBytes <= 0 {
		l.MaxKeyBytes = 1024
	}
	if l.MaxTokenBytes <= 0 {
		l.MaxTokenBytes = 256
	}
	return l
}

// maxTTL keeps TTLs within what Redis's PEXPIRE takes and time.Duration holds.
const maxTTL = math.MaxInt64 / int64(time.Millisecond)

// lockArgs is LOCK key [PX ms | EX s] [WAIT ms] [TOKEN token].
type lockArgs struct {
	key   string
	ttl   time.Duration // 0: connection-bound
	wait  time.Duration
	waits bool
	token string
}

// key reads a stored key (resp.DBKey): the limits apply to the key the
// client sent, without its database prefix.
func (l Limits) key(b []byte) (string, error) {
	switch n := len(resp.ClientKey(string(b))); {
	case n == 0:
		return "", errEmptyKey
	case n > l.MaxKeyBytes:
		return "", tooLong("key", l.MaxKeyBytes)
	}
	return string(b), nil
}

func (l Limits) token(b []byte) (string, error) {
	switch {
	case len(b) == 0:
		return "", errEmptyToken
	case len(b) > l.MaxTokenBytes:
		return "", tooLong("token", l.MaxTokenBytes)
	}
	return string(b), nil
}

// parseLock parses LOCK's arguments (args[0] is the command name). Options
// come in any order and letter case, each at most once.
func (l Limits) parseLock(args [][]byte) (lockArgs, error) {
	var a lockArgs
	var err error
	if a.key, err = l.key(args[1]); err != nil {
		return a, err
	}
	var seen uint8 // one bit per option: each comes at most once
	for i := 2; i < len(args); i += 2 {
		opt := lockOption(args[i])
		if opt == 0 || i+1 >= len(args) || seen&opt != 0 {
			return a, errSyntax
		}
		seen |= opt
		val := args[i+1]
		switch opt {
		case optPX:
			a.ttl, err = ttlArg(val, time.Millisecond, "lock")
		case optEX:
			a.ttl, err = ttlArg(val, time.Second, "lock")
		case optWait:
			a.waits = true
			a.wait, err = waitArg(val)
		case optToken:
			a.token, err = l.token(val)
		}
		if err != nil {
			return a, err
		}
	}
	if seen&optPX != 0 && seen&optEX != 0 {
		return a, errSyntax
	}
	return a, nil
}

const (
	optPX uint8 = 1 << iota
	optEX
	optWait
	optToken
)

// lockOption names LOCK's option b in any letter case; 0 if unknown.
func lockOption(b []byte) uint8 {
	switch {
	case strings.EqualFold(string(b), "PX"):
		return optPX
	case strings.EqualFold(string(b), "EX"):
		return optEX
	case strings.EqualFold(string(b), "WAIT"):
		return optWait
	case strings.EqualFold(string(b), "TOKEN"):
		return optToken
	}
	return 0
}

// ttlArg parses a positive TTL counted in unit.
func ttlArg(b []byte, unit time.Duration, cmd string) (time.Duration, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	switch {
	case err != nil:
		return 0, errNotInteger
	case n <= 0 || n > maxTTL/int64(unit/time.Millisecond):
		return 0, invalidExpire(cmd)
	}
	return time.Duration(n) * unit, nil
}

// waitArg parses WAIT's milliseconds; 0 means wait without limit.
func waitArg(b []byte) (time.Duration, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	switch {
	case err != nil:
		return 0, errNotInteger
	case n < 0 || n > maxTTL:
		return 0, errTimeoutRange
	}
	return time.Duration(n) * time.Millisecond, nil
}

// parseRenew parses RENEW key token [PX ms].
func (l Limits) parseRenew(args [][]byte) (key, token string, ttl time.Duration, err error) {
	if key, err = l.key(args[1]); err != nil {
		return
	}
	if token, err = l.token(args[2]); err != nil {
		return
	}
	switch {
	case len(args) == 3:
	case len(args) == 5 && strings.EqualFold(string(args[3]), "PX"):
		ttl, err = ttlArg(args[4], time.Millisecond, "renew")
	default:
		err = errSyntax
	}
	return
}
