package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/luascript"
	"github.com/lockproxy/lockproxy/resp"
	"go.uber.org/zap"
)

// Handler holds what the lock commands need. It implements resp.Session.
type Handler struct {
	engine  *engine.Engine
	limits  Limits
	legacy  Legacy
	scripts *luascript.Cache
	run     Scripts
	log     *zap.Logger
}

var _ resp.Session = (*Handler)(nil)

// Config configures the commands.
type Config struct {
	Limits  Limits
	Legacy  Legacy
	Scripts Scripts
}

// Legacy configures the legacy commands.
type Legacy struct {
	// DelFromAnyConnection lets DEL, UNLINK, DELEX without a condition,
	// EXPIRE and PEXPIRE act on a lock whichever connection took it, as
	// Redis does; pooled clients lock on one connection and unlock on
	// another. Off, they act only on locks the same connection took.
	DelFromAnyConnection bool
	// MaxScripts bounds the SCRIPT cache (default 1000).
	MaxScripts int
}

// New returns the lock command handler over e.
func New(e *engine.Engine, cfg Config, log *zap.Logger) *Handler {
	if cfg.Legacy.MaxScripts <= 0 {
		cfg.Legacy.MaxScripts = 1000
	}
	return &Handler{engine: e, limits: cfg.Limits.withDefaults(), legacy: cfg.Legacy,
		scripts: luascript.NewCache(cfg.Legacy.MaxScripts), run: cfg.Scripts.withDefaults(), log: log}
}

// Register adds the lock commands, native and legacy, to t.
func (h *Handler) Register(t *resp.Table) error {
	return errors.Join(h.registerNative(t), h.registerLegacy(t), h.registerScripts(t), h.registerAdmin(t), h.registerDurability(t), h.registerReads(t), h.registerMulti(t))
}

func (h *Handler) registerNative(t *resp.Table) error {
	return t.Add(
		resp.Command{Name: "lock", Arity: -2, Handler: h.lock, Class: resp.Native, Keys: resp.FirstKey, Info: lockInfo, Waits: lockLimit},
		resp.Command{Name: "unlock", Arity: 3, Handler: h.unlock, Class: resp.Native, Keys: resp.FirstKey, Info: unlockInfo},
		resp.Command{Name: "renew", Arity: -3, Handler: h.renew, Class: resp.Native, Keys: resp.FirstKey, Info: renewInfo},
		resp.Command{Name: "lockinfo", Arity: 2, Handler: h.lockinfo, Class: resp.Native, Keys: resp.FirstKey, Info: lockinfoInfo},
	)
}

// lockLimit reports that LOCK with a WAIT option may wait in line, so it
// counts against the waiters' limit (every option takes a value, so options
// are at even places).
func lockLimit(args [][]byte) resp.Waits {
	for i := 2; i < len(args); i += 2 {
		if strings.EqualFold(string(args[i]), "WAIT") {
			return resp.LockWaiter
		}
	}
	return resp.NoWait
}

// lock is LOCK key [PX ms | EX s] [WAIT ms] [TOKEN token]: an array of
// token, fencing token and validity in ms, or a null array if not acquired.
func (h *Handler) lock(c *resp.Conn, args [][]byte) {
	a, err := h.limits.parseLock(args)
	if err != nil {
		c.Error(err.Error())
		return
	}
	hold := engine.Hold{Token: a.token, TTL: a.ttl, Name: c.Name()}
	var g engine.Grant
	if lockWaits(c, a) {
		g, err = h.waitLock(c, a, hold)
	} else {
		g, err = h.engine.Lock(c.Context(), owner(c), a.key, hold)
	}
	switch {
	case errors.Is(err, engine.ErrNotAcquired):
		c.NullArray()
	case err != nil:
		c.Error(replyError(a.key, err))
	default:
		session(c).took(a.key, grantID{g.Token, g.Fence})
		c.Array(3)
		c.BulkString(g.Token)
		c.Int(g.Fence)
		c.Int(g.Validity.Milliseconds())
	}
}

// waitLock is LOCK ... WAIT ms: it blocks until the lock is granted, the
// wait elapses (WAIT 0: no limit), or the client closes the connection or
// sends QUIT. A wait that ends without the lock is ErrNotAcquired.
func (h *Handler) waitLock(c *resp.Conn, a lockArgs, hold engine.Hold) (engine.Grant, error) {
	ctx := c.Context()
	if a.wait > 0 {
		var cancelWait context.CancelFunc
		ctx, cancelWait = context.WithTimeout(ctx, a.wait)
		defer cancelWait()
	}
	ctx, cancel := c.UntilClose(ctx)
	defer cancel()
	g, err := h.engine.LockWait(ctx, owner(c), a.key, hold)
	if err != nil && ctx.Err() != nil {
		return g, engine.ErrNotAcquired // the wait ended, not the backend
	}
	return g, err
}

// unlock is UNLOCK key token: 1 released, 0 not held by that token.
func (h *Handler) unlock(c *resp.Conn, args [][]byte) {
	key, err := h.limits.key(args[1])
	if err != nil {
		c.Error(err.Error())
		return
	}
	if h.lostHere(c, key) {
		return
	}
	ok, err := h.engine.Unlock(c.Context(), key, string(args[2]))
	switch {
	case err != nil:
		c.Error(replyError(key, err))
	case ok:
		c.Int(1)
	default:
		c.Int(0)
	}
}

// renew is RENEW key token [PX ms]: the new validity in ms, or null if the
// token no longer holds the key.
func (h *Handler) renew(c *resp.Conn, args [][]byte) {
	key, token, ttl, err := h.limits.parseRenew(args)
	if err != nil {
		c.Error(err.Error())
		return
	}
	if h.lostHere(c, key) {
		return
	}
	v, err := h.engine.Renew(c.Context(), key, token, ttl)
	switch {
	case errors.Is(err, engine.ErrNotHeld):
		c.Null()
	case err != nil:
		c.Error(replyError(key, err))
	default:
		c.Int(v.Milliseconds())
	}
}

// lockinfo is LOCKINFO key: a map of the holder's fence, validity (ms),
// mode, client name and the number of waiters, or null when nobody holds
// the key. It never shows the token.
func (h *Handler) lockinfo(c *resp.Conn, args [][]byte) {
	key, err := h.limits.key(args[1])
	if err != nil {
		c.Error(err.Error())
		return
	}
	if h.lostHere(c, key) {
		return
	}
	hd, ok, err := h.engine.Info(c.Context(), key)
	switch {
	case err != nil:
		c.Error(replyError(key, err))
	case !ok:
		c.NullArray()
	default:
		c.Map(5)
		c.BulkString("fence")
		c.Int(hd.Fence)
		c.BulkString("validity")
		c.Int(hd.Validity.Milliseconds())
		c.BulkString("mode")
		c.BulkString(string(hd.Mode))
		c.BulkString("holder")
		c.BulkString(hd.Name)
		c.BulkString("waiters")
		c.Int(int64(h.engine.Waiters(key)))
	}
}

// Opened gives the new connection its session.
func (h *Handler) Opened(c *resp.Conn) {
	o := h.engine.NewOwner(c.ID())
	o.OnLost(func(key, reason string) { c.Push(pushLockLost, resp.ClientKey(key), reason) })
	c.State = &connSession{owner: o, trackTaken: !h.legacy.DelFromAnyConnection}
}

// Closed releases the connection-bound locks of a connection that is gone.
func (h *Handler) Closed(c *resp.Conn) {
	if err := owner(c).Close(c.Context()); err != nil {
		h.log.Warn("releasing a closed connection's locks", zap.Uint64("client", c.ID()), zap.Error(err))
	}
}

// Reset releases the connection-bound locks, as a new connection has none:
// at once, as the client asked (no lock-delay).
func (h *Handler) Reset(c *resp.Conn) {
	if err := owner(c).Release(c.Context()); err != nil {
		h.log.Warn("releasing a reset connection's locks", zap.Uint64("client", c.ID()), zap.Error(err))
	}
	h.Opened(c)
}

// Info is the "# Locks" section of INFO.
func (h *Handler) Info(section string) string {
	if !resp.Wants(section, "locks") {
		return ""
	}
	s := h.engine.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "# Locks\r\nlocks_granted:%d\r\nlocks_released:%d\r\nbound_locks_held:%d\r\nrenewals:%d\r\nrenewal_failures:%d\r\nlocks_lost:%d\r\nlocks_delayed:%d\r\nwaiters:%d\r\nbound_lease_ms:%d\r\n\r\n",
		s.Grants.Load(), s.Releases.Load(), h.engine.BoundHeld(), s.Renewals.Load(), s.RenewFailures.Load(), s.Lost.Load(), s.Delayed.Load(),
		h.engine.Waiters(""), h.engine.Config().BoundLease/time.Millisecond)
	return b.String()
}
