package commands

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/resp"
)

// Scripts outside the catalog that pass luascript.Admit run unchanged on
// every node of the redlock (or embedded) backend, and the client gets
// the reply a majority gave (quorum.Redlock.Eval).

// ScriptRunner runs an admitted script on every node of the backend.
// *quorum.Redlock implements it.
type ScriptRunner interface {
	Eval(ctx context.Context, s *luascript.Admitted, keys, args []string, limit time.Duration) (luascript.Reply, error)
}

// DefaultScriptTimeLimit is the default time limit of a script run on the
// nodes: Redis's own busy-reply threshold (lua-time-limit), 5 s.
const DefaultScriptTimeLimit = 5 * time.Second

// Scripts configures scripts outside the catalog.
type Scripts struct {
	// Runner runs them; nil: the backend cannot (zookeeper), and they are
	// refused with an error naming the redlock backend.
	Runner ScriptRunner
	// Backend names the backend in that error.
	Backend string
	// TimeLimit bounds a script's run on the nodes; a node that has not
	// finished by then is sent SCRIPT KILL. Default DefaultScriptTimeLimit.
	TimeLimit time.Duration
	// Publish delivers the PUBLISH of a catalogued script (Spring's
	// PUB_SUB_LOCK unlock) to the clients' pub/sub; nil: it is dropped.
	Publish func(ctx context.Context, channel string, payload []byte) (int64, error)
	// Reserved is the prefix of lockproxy's own keys on the nodes
	// (redlock.key_prefix): a script may not name a key under it, other
	// than a SELECTed database's, nor, when it derives keys by
	// concatenation, a key that the prefix begins with.
	Reserved string
}

func (s Scripts) withDefaults() Scripts {
	if s.TimeLimit <= 0 {
		s.TimeLimit = DefaultScriptTimeLimit
	}
	return s
}

// runOnNodes runs s on every node and replies with the majority's reply.
func (h *Handler) runOnNodes(c *resp.Conn, s *luascript.Admitted, keys, argv [][]byte) error {
	if err := h.mayDerive(c, s, keys); err != nil {
		return err
	}
	r, err := h.evalOnNodes(c, s, keys, argv)
	if err != nil {
		return err
	}
	if s.SetsTTL {
		h.leaseAfterScript(c, s, keys)
	}
	writeReply(c, r)
	return nil
}

// mayDerive refuses, for a user limited to key patterns, a script that
// derives keys (and channels) from a key its patterns do not cover with
// every extension: only a pattern ending in * does.
func (h *Handler) mayDerive(c *resp.Conn, s *luascript.Admitted, keys [][]byte) error {
	if !s.DerivesKeys {
		return nil
	}
	for _, k := range keys {
		if !c.MayTouchFrom(string(k)) {
			return argError("NOPERM this script derives keys from '" + oneLine(resp.ClientKey(string(k))) +
				"' (KEYS[i] .. ...), and no key pattern of this user ending in * covers every key that begins with it")
		}
	}
	return nil
}

// pttlScript reads a key's remaining time on the nodes.
var pttlScript = mustAdmit("return redis.call('PTTL', KEYS[1])")

func mustAdmit(src string) *luascript.Admitted {
	s, err := luascript.Admit([]byte(src))
	if err != nil {
		panic(err)
	}
	return s
}

// leaseAfterScript turns each lock bound to its connection whose key s may
// have given a TTL into a lease of the time its key has left on the nodes
// (as PEXPIRE does), so that the watchdog stops renewing it. A lock whose
// key has no TTL, or that could not be read, stays as it is.
func (h *Handler) leaseAfterScript(c *resp.Conn, s *luascript.Admitted, keys [][]byte) {
	for i, k := range keys {
		if s.TTLKeys != nil && !slices.Contains(s.TTLKeys, i+1) {
			continue
		}
		hd, held, err := h.engine.Info(c.Context(), string(k))
		if err != nil || !held || hd.Mode != engine.Bound || hd.Type != "" {
			continue
		}
		r, err := h.evalOnNodes(c, pttlScript, keys[i:i+1], nil)
		if err == nil && r.Kind == luascript.Int && r.Int > 0 {
			_, err = h.setLease(c.Context(), string(k), hd.Token, r.Int)
		}
		if err != nil {
			h.log.Warn("a script set a TTL on a connection-bound lock, which could not be made a lease", zap.String("key", string(k)), zap.Error(err))
		}
	}
}

// evalOnNodes runs s on every node and returns the majority's reply.
func (h *Handler) evalOnNodes(c *resp.Conn, s *luascript.Admitted, keys, argv [][]byte) (luascript.Reply, error) {
	if h.run.Runner == nil {
		return luascript.Reply{}, h.noRunner()
	}
	for _, k := range keys {
		if _, err := h.limits.key(k); err != nil {
			return luascript.Reply{}, err
		}
		if err := h.run.reserved(string(k), s.DerivesKeys); err != nil {
			return luascript.Reply{}, err
		}
	}
	if err := s.CheckARGV(argv); err != nil {
		return luascript.Reply{}, argError(err.Error())
	}
	r, err := h.run.Runner.Eval(c.Context(), s, toStrings(keys), toStrings(argv), h.run.TimeLimit)
	var ee *luascript.EvalError
	if errors.As(err, &ee) && ee.TimedOut > 0 {
		h.log.Warn("a script run on the nodes outlived scripts.time_limit_ms; SCRIPT KILL sent to the nodes still running it",
			zap.String("sha", s.SHA), zap.Int("nodes", ee.TimedOut), zap.Duration("limit", ee.Limit))
	}
	if err != nil {
		return luascript.Reply{}, err
	}
	return r, nil
}

// noRunner refuses a script outside the catalog on a backend that cannot
// run scripts.
func (h *Handler) noRunner() error {
	return argError("ERR this script is not in lockproxy's catalog (docs/lock-scripts.md); scripts outside it run only on the redlock backend " +
		"(backend = \"redlock\" or \"embedded\"), and this instance uses the " + h.run.Backend + " backend")
}

func toStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// reserved refuses a key that would let a script write lockproxy's own
// keys on the nodes (fencing counters, waiting lines): one under the
// prefix, unless it is a SELECTed database's key, or, for a script that
// derives keys from KEYS by concatenation, one the prefix begins with.
func (s Scripts) reserved(key string, derives bool) error {
	if s.Reserved == "" {
		return nil
	}
	under := strings.HasPrefix(key, s.Reserved) && resp.ClientKey(key) == key
	if under || derives && strings.HasPrefix(s.Reserved, key) {
		return argError("ERR lockproxy refused this script before running it on any node: key '" + oneLine(resp.ClientKey(key)) +
			"' could reach lockproxy's own keys on the nodes (prefix '" + s.Reserved + "', redlock.key_prefix)")
	}
	return nil
}
