package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

var _ quorum.Node = (*RedisNode)(nil)

// Defaults for the zero values of RedisOptions.
const (
	DefaultPrefix      = "lockproxy:"
	DefaultPipelines   = 1
	DefaultMaxBatch    = 128
	DefaultDialTimeout = 5 * time.Second
	DefaultTimeout     = 5 * time.Second
)

// RedisOptions configure a RedisNode. Zero values take the defaults noted.
type RedisOptions struct {
	Addr     string // host:port of the node
	Password string // AUTH password; empty for none
	// TLSConfig, when set, makes the connections to the node TLS.
	TLSConfig *tls.Config
	DB        int // database number; default 0
	// Prefix is prepended to every key lockproxy writes on the node;
	// default "lockproxy:".
	Prefix string
	// PoolSize caps the connections of the node's status reads and
	// surveys (the scripts have a connection of their own, conn.go);
	// default Pipelines.
	PoolSize int
	// Pipelines is the number of batches awaiting their replies on the
	// node's connection at once; default 1: one batch at a time makes the
	// largest batches, which measured fastest (bench/).
	Pipelines int
	// MaxBatch is the most calls sent in one batch; default 128.
	MaxBatch int
	// DialTimeout bounds one connection attempt; default 5s. A failed dial
	// is not retried: the quorum layer decides what to do about a dead node.
	DialTimeout time.Duration
	// Timeout caps one round trip to the node, whatever the callers'
	// deadlines; default 5s.
	Timeout time.Duration
	// DriftFactor and DriftFixed are the clock drift allowed between two
	// replies (per unit of time between them, and fixed): a node whose
	// clock moved by more jumped (clock.go). Defaults: quorum's
	// DefaultDriftFactor and DefaultDriftFixed, as redlock.drift_factor and
	// drift_fixed_ms.
	DriftFactor float64
	DriftFixed  time.Duration
	// ClockSkew is how far the node's wall clock may be from this
	// process's when its first reply is read (redlock.clock_skew_ms):
	// beyond it, the node's clock is taken to have jumped before this
	// instance started (clock.go). Zero: not checked.
	ClockSkew time.Duration
	// Observe, when set, is told of every call of Do once it is answered or
	// fails: how long it took and its error. It runs on the goroutine that
	// delivers the reply, so it must be quick.
	Observe func(took time.Duration, err error)
}

func (o RedisOptions) withDefaults() RedisOptions {
	o.Prefix = orDefault(o.Prefix, DefaultPrefix)
	o.Pipelines = orDefault(o.Pipelines, DefaultPipelines)
	o.PoolSize = orDefault(o.PoolSize, o.Pipelines)
	o.MaxBatch = orDefault(o.MaxBatch, DefaultMaxBatch)
	o.DialTimeout = orDefault(o.DialTimeout, DefaultDialTimeout)
	o.Timeout = orDefault(o.Timeout, DefaultTimeout)
	o.DriftFixed = orDefault(o.DriftFixed, quorum.DefaultDriftFixed)
	if o.DriftFactor <= 0 {
		o.DriftFactor = quorum.DefaultDriftFactor
	}
	return o
}

// orDefault returns v, or def when v is the zero value (or negative).
func orDefault[T int | string | time.Duration](v, def T) T {
	var zero T
	if v <= zero {
		return def
	}
	return v
}

// clientOptions configure go-redis for a node's status reads, surveys and
// SCRIPT KILL: no retries (retrying is the quorum layer's business),
// deadlines taken from the context, and pipelines on the one main pool.
func (o RedisOptions) clientOptions() *redis.Options {
	opts := &redis.Options{
		Addr:                  o.Addr,
		Password:              o.Password,
		TLSConfig:             o.TLSConfig,
		DB:                    o.DB,
		PoolSize:              o.PoolSize,
		PipelinePoolSize:      -1,
		DialTimeout:           o.DialTimeout,
		DialerRetries:         1,
		MaxRetries:            -1,
		Protocol:              2, // RESP3 would only add a push-notification check per pipeline
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
	return opts
}

// RedisNode is a quorum.Node over one Redis node. Concurrent calls share
// round trips: the calls queued while the node's connection has no room
// go out together (up to MaxBatch in one batch) once it has (conn.go).
type RedisNode struct {
	addr        string
	prefix      string
	released    string // channel of release notifications
	maxBatch    int
	pipelines   int
	timeout     time.Duration
	dialTimeout time.Duration
	password    string
	db          int
	tls         *tls.Config
	client      *redis.Client // status reads, surveys, SCRIPT KILL

	mu      sync.Mutex
	idle    sync.Cond // on mu: broadcast when the connection may have nothing left to do
	queue   []*call   // not sent yet, in arrival order
	pruneAt int       // the queue's length at which calls abandoned are taken out
	conn    *nodeConn // nil until dialled, and once broken
	dialing bool      // a dial is under way
	closed  bool      // set by Close: no call is queued after it

	closeOnce sync.Once
	closeErr  error
	workers   sync.WaitGroup // dials, readers and status reads

	roundTrips atomic.Uint64
	sent       atomic.Uint64
	clock      nodeClock                  // what the node's replies said of its wall clock (clock.go)
	observe    func(time.Duration, error) // RedisOptions.Observe

	// incarnation is the run id of the node process that the newest
	// connection reached (read by INFO when it was opened). A reply to a
	// script carries the run id its own connection reached; a status
	// read's, this (a restart closes every connection, so a reply came
	// from this process or from one before it whose connections no longer
	// answer, which the restart rule counts only once it vetted it).
	incarnation atomic.Pointer[string]
}

// NewRedisNode makes a node for the Redis node at o.Addr, which it
// connects to on the first call. Close closes it.
func NewRedisNode(o RedisOptions) *RedisNode {
	o = o.withDefaults()
	n := &RedisNode{
		addr:        o.Addr,
		prefix:      o.Prefix,
		released:    releasedChannel(o.Prefix),
		maxBatch:    o.MaxBatch,
		pipelines:   o.Pipelines,
		timeout:     o.Timeout,
		dialTimeout: o.DialTimeout,
		password:    o.Password,
		db:          o.DB,
		tls:         o.TLSConfig,
		observe:     o.Observe,
	}
	n.idle.L = &n.mu
	n.pruneAt = 2 * n.maxBatch * n.pipelines
	n.clock.factor, n.clock.fixed, n.clock.skew = o.DriftFactor, o.DriftFixed, o.ClockSkew
	copts := o.clientOptions()
	copts.OnConnect = n.onConnect
	n.client = redis.NewClient(copts)
	return n
}

// Close refuses new calls (ErrClosed), lets the calls already queued or
// sent finish, each within its own deadline, and closes the connections.
// Calling it again returns the first result.
func (n *RedisNode) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true // no call is queued after this
		for len(n.queue) > 0 || n.dialing || n.conn != nil && len(n.conn.pending) > 0 {
			n.idle.Wait()
		}
		cn := n.conn
		n.conn = nil
		n.mu.Unlock()
		if cn != nil {
			_ = cn.nc.Close() // its reader ends
		}
		n.workers.Wait()
		n.closeErr = n.client.Close()
	})
	return n.closeErr
}

// String is the node's address.
func (n *RedisNode) String() string { return n.addr }

// Stats counts a node's traffic since it was created.
type Stats struct {
	Calls      uint64 // script calls sent; a NOSCRIPT re-send counts again
	RoundTrips uint64 // pipelines sent
}

// Stats reports the node's traffic counters.
func (n *RedisNode) Stats() Stats {
	return Stats{Calls: n.sent.Load(), RoundTrips: n.roundTrips.Load()}
}

// Do sends op to the node, or queues it while the node's connection has
// no room, and returns without waiting for the node; the reply arrives on
// done. It implements quorum.Node. Errors in the reply do not carry the
// node's address: the caller knows which node it asked.
//
// A write to the node never waits for the node: the connection holds at
// most Pipelines batches the node has not answered, far less than the
// socket's buffers take, so that a fan-out does not wait on one node
// before sending to the others. A status read runs in a goroutine of its
// own (status).
func (n *RedisNode) Do(ctx context.Context, op *quorum.Op, tag int, done quorum.Sink) {
	if op.Kind == quorum.OpKill {
		go n.kill(ctx, tag, done) // not behind the batch the script holds up
		return
	}
	c := &call{ctx: ctx, op: op, tag: tag, done: done, observe: n.observe}
	if c.observe != nil {
		c.start = time.Now()
	}
	n.mu.Lock()
	switch {
	case n.closed:
		n.mu.Unlock()
		c.fail(ErrClosed)
		return
	case op.Kind == quorum.OpStatus:
		n.workers.Go(func() { n.status(c) })
		n.mu.Unlock()
		return
	}
	n.queue = append(n.queue, c)
	var gone []*call
	if len(n.queue) >= n.pruneAt {
		gone = n.prune()
	}
	n.dispatch(nil)
	for _, c := range gone {
		c.fail(c.ctx.Err())
	}
}

// do runs op and waits for its reply or ctx; errors carry the address.
func (n *RedisNode) do(ctx context.Context, op *quorum.Op) quorum.Reply {
	done := make(quorum.Replies, 1)
	n.Do(ctx, op, 0, done)
	select {
	case r := <-done:
		r.Err = n.callErr(ctx, r.Err)
		return r
	case <-ctx.Done():
		return quorum.Reply{Err: ctx.Err()}
	}
}

// Acquire runs acquire.lua: take key for h or reset its TTL if h.Token holds
// it, reading the fencing counter in the same step.
func (n *RedisNode) Acquire(ctx context.Context, key string, h engine.Hold) (quorum.Claim, error) {
	r := n.do(ctx, &quorum.Op{Kind: quorum.OpAcquire, Key: key, Hold: h})
	return r.Claim, r.Err
}

// Extend runs extend.lua: reset the TTL (rounded up to whole milliseconds)
// of key if token holds it — a zero ttl reuses the lock's own — and record
// mode unless it is empty. It returns the TTL applied, 0 if not held.
func (n *RedisNode) Extend(ctx context.Context, key, token string, ttl time.Duration, mode engine.Mode) (time.Duration, error) {
	r := n.do(ctx, &quorum.Op{Kind: quorum.OpExtend, Key: key, Token: token, TTL: ttl, Mode: mode})
	return r.TTL, r.Err
}

// Release runs release.lua: delete key if token holds it, and then publish
// key on the node's release channel (see Subscribe). The fencing counter
// stays.
func (n *RedisNode) Release(ctx context.Context, key, token string) (bool, error) {
	r := n.do(ctx, &quorum.Op{Kind: quorum.OpRelease, Key: key, Token: token})
	return r.OK, r.Err
}

// Inspect runs inspect.lua: read the entry of key.
func (n *RedisNode) Inspect(ctx context.Context, key string) (quorum.Entry, bool, error) {
	r := n.do(ctx, &quorum.Op{Kind: quorum.OpInspect, Key: key})
	return r.Entry, r.OK, r.Err
}

// command is the script and arguments that run op on the node (keys.go
// has the layout).
func (n *RedisNode) command(op *quorum.Op) (*script, []string, []any) {
	lock, meta := n.lockKey(op.Key), n.metaKey(op.Key)
	switch op.Kind {
	case quorum.OpAcquire:
		line, deadlines := n.lineKeys(op.Key)
		keys := []string{lock, n.layoutKey(), line, deadlines, n.undoKey(op.Attempt),
			n.prefix + "fence-floor", n.prefix + "fence-max", meta, n.releasedKey(op.Key)}
		return acquireScript, keys, acquireArgs(op.Hold, op.Attempt, op.MetaFor)
	case quorum.OpCommit:
		return commitScript, []string{lock, n.layoutKey(), n.prefix + "fence-max", meta, n.prefix + "fence-floor"}, []any{op.Token, op.Fence, op.Attempt, millis(op.MetaFor)}
	case quorum.OpExtend:
		return extendScript, []string{lock, meta, n.releasedKey(op.Key)}, []any{op.Token, millis(op.TTL), string(op.Mode), op.Attempt, millis(op.MarkFor), millis(op.MetaFor)}
	case quorum.OpRelease:
		leave, took := "1", ""
		if op.Rollback {
			leave, took = "0", "1"
		}
		line, deadlines := n.lineKeys(op.Key)
		first, second := "", ""
		if len(op.Line) > 0 {
			first = op.Line[0].ID
		}
		if len(op.Line) > 1 {
			second = op.Line[1].ID
		}
		keys := []string{lock, line, deadlines, n.undoKey(op.Undo), meta, n.releasedKey(op.Key)}
		return releaseScript, keys, []any{op.Token, n.released, op.Key, leave, op.Attempt, first, op.Undo, millis(op.UndoFor + quorum.UndoGrace), second, took, millis(op.MarkFor), metaField(op.Token), millis(op.MetaFor)}
	case quorum.OpHeal:
		keys := append([]string{lock, meta, n.releasedKey(op.Key)}, n.healCounters()...)
		h := op.Hold
		return healScript, keys, []any{h.Token, op.Fence, string(h.Mode), h.Name, millis(h.TTL), op.Attempt, op.FreeAt, op.HealUntil, millis(op.MetaFor)}
	case quorum.OpLeave:
		line, deadlines := n.lineKeys(op.Key)
		return leaveScript, []string{line, deadlines}, []any{op.Token, n.released, op.Key}
	case quorum.OpFloor:
		return floorScript, []string{n.prefix + "fence-floor", n.prefix + "fence-max", n.prefix + "vetted", n.layoutKey(), n.vettedFloorKey()}, []any{op.Fence, op.Token}
	default:
		return inspectScript, []string{lock, meta}, nil
	}
}

// acquireArgs are acquire.lua's arguments for h. The line orders waiters by
// arrival in microseconds: waiters a millisecond apart keep their order.
// The meta is kept metaFor longer than the key (quorum.Op.MetaFor).
func acquireArgs(h engine.Hold, attempt string, metaFor time.Duration) []any {
	id, since, keep := "", int64(0), int64(0)
	if w := h.Waiter; w != nil {
		id, since, keep = w.ID, w.Since.UnixMicro(), w.Keep.Microseconds()
	}
	next, nextSince := "", int64(0)
	if w := h.Next; w != nil {
		next, nextSince, keep = w.ID, w.Since.UnixMicro(), w.Keep.Microseconds()
	}
	fresh := ""
	if h.Fresh {
		fresh = "1"
	}
	ttl := millis(h.TTL)
	// The meta's fields the instance knows, as meta.lua's encode writes
	// them: the script writes the meta as one concatenation around the fence.
	rest := metaField(string(h.Mode)) + metaField(h.Name) + metaField(strconv.FormatInt(ttl, 10)) + metaField(attempt)
	return []any{h.Token, ttl, metaField(h.Token), rest, id, since, keep, next, nextSince, attempt, fresh, ttl + millis(metaFor)}
}

// metaField is s as a field of a lock's meta (meta.lua's encode): its
// length in bytes, ':' and its bytes.
func metaField(s string) string {
	return strconv.Itoa(len(s)) + ":" + s
}

// wrap adds the node's address to err.
func (n *RedisNode) wrap(err error) error {
	if err == nil {
		return nil
	}
	return &NodeError{Addr: n.addr, Err: err}
}

// millis is d in whole milliseconds, rounded up and at least 1: a TTL of 0
// would make PEXPIRE delete the key.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0 // extend.lua: reuse the lock's own ttl
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// leave runs leave.lua: take waiter out of key's line.
func (n *RedisNode) leave(ctx context.Context, key, waiter string) (bool, error) {
	r := n.do(ctx, &quorum.Op{Kind: quorum.OpLeave, Key: key, Token: waiter})
	return r.OK, r.Err
}

// onConnect reads the run id of the process a new connection reached,
// before the connection carries any call: the restart rule counts a reply
// only from the process it vetted (quorum/restart.go). A node that does not
// answer INFO (a renamed command) gets no incarnation, and the rule never
// counts it; a connection that fails the read is not used.
func (n *RedisNode) onConnect(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		info = ""
	case err != nil:
		return err
	}
	id := infoField(info, "run_id")
	n.incarnation.Store(&id)
	return nil
}

// Incarnation is the run id of the node process the newest connection
// reached ("" before the first connection or when INFO is refused).
func (n *RedisNode) Incarnation() string {
	if p := n.incarnation.Load(); p != nil {
		return *p
	}
	return ""
}

// vettedFloor is the counter that v, the vetted floor floor.lua records
// ("<counter>:<run id>"), names for process runID: 0 when there is none
// (a node vetted by a build before the record, or never), it names
// another process (the node restarted since), or it is not floor.lua's.
func vettedFloor(v, runID string) int64 {
	f, run := vettedRecord(v)
	if run != runID {
		return 0
	}
	return f
}

// vettedRecord is the counter and the run id that v, the vetted floor
// floor.lua records, names; 0 and "" where v is not floor.lua's.
func vettedRecord(v string) (int64, string) {
	c, run, ok := strings.Cut(v, ":")
	f, err := strconv.ParseInt(c, 10, 64)
	if !ok || err != nil || f < 0 || run == "" {
		return 0, ""
	}
	return f, run
}

// infoField is the value of field in an INFO reply, "" when absent.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v
		}
	}
	return ""
}

// status reads what the node says of itself (quorum.OpStatus) in one
// pipeline, within the call's deadline capped by Timeout: INFO server for
// the run id and uptime, CONFIG GET for appendonly and appendfsync
// (durable only when both read yes and always; a CONFIG that fails is not
// verified), and the vetted run id, the vetted floor and the largest
// counter that the scripts keep. Status reads are rare (one a second per
// Redlock): they go through go-redis's pool.
func (n *RedisNode) status(c *call) {
	if err := c.ctx.Err(); err != nil {
		c.fail(err)
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), n.batchDeadline([]*call{c}))
	defer cancel()
	pipe := n.client.Pipeline()
	info := pipe.Info(ctx, "server")
	aof := pipe.ConfigGet(ctx, "appendonly")
	fsync := pipe.ConfigGet(ctx, "appendfsync")
	vetted := pipe.Get(ctx, n.prefix+"vetted")
	floor := pipe.Get(ctx, n.vettedFloorKey())
	top := pipe.Get(ctx, n.layoutKey())            // layout 3's; WRONGTYPE in layout 2
	top2 := pipe.HGet(ctx, n.layoutKey(), "fence") // layout 2's; WRONGTYPE in layout 3
	old := pipe.Get(ctx, n.prefix+"fence-max")     // layout 1's; WRONGTYPE since layout 2
	now := pipe.Time(ctx)
	n.roundTrips.Add(1)
	sent := mono()
	_, _ = pipe.Exec(ctx)
	jumped := n.clock.note(now, sent, mono())
	r := quorum.Reply{Tag: c.tag, Incarnation: n.Incarnation()}
	defer func() { c.deliver(r); n.clock.delivered(jumped) }()
	if jumped != nil {
		r.Err = jumped
		return
	}
	if err := info.Err(); err != nil {
		r.Err = err
		return
	}
	s := &r.Status
	s.RunID = infoField(info.Val(), "run_id")
	up, err := strconv.ParseInt(infoField(info.Val(), "uptime_in_seconds"), 10, 64)
	if s.RunID == "" || err != nil {
		r.Err = badReply("INFO server", info.Val())
		return
	}
	s.Uptime = time.Duration(up) * time.Second
	s.Durable = aof.Err() == nil && fsync.Err() == nil && aof.Val()["appendonly"] == "yes" && fsync.Val()["appendfsync"] == "always"
	for _, cmd := range []*redis.StringCmd{top, top2, old} {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
			cmd.SetErr(redis.Nil)
		}
	}
	for _, cmd := range []*redis.StringCmd{vetted, top, top2, old} {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			r.Err = err
			return
		}
	}
	s.Vetted = vetted.Val()
	// A record that cannot be read (another type, or not floor.lua's:
	// written by something else) is as none, the case of a node vetted by
	// a build before the record: failing the read would hold the node out
	// for good. Its next raise writes it anew
	// (TestUnreadableVettedFloorCountedAgain).
	if floor.Err() == nil {
		s.Floor = vettedFloor(floor.Val(), s.RunID)
		s.Recorded, _ = vettedRecord(floor.Val())
	}
	// The node's counter: layout 3's, layout 2's, or on a node still in
	// layout 1 its fence-max, at least every counter there.
	for _, v := range []string{top.Val(), top2.Val(), old.Val()} {
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64) // layout 1's was written by Lua: may read 1e+15
		if err != nil {
			r.Err = badReply("fence counter", v)
			return
		}
		s.FenceMax = max(s.FenceMax, int64(f))
	}
}
