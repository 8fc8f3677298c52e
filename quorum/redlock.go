package quorum

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/engine"
)

// Defaults for Config's zero fields.
const (
	DefaultDriftFactor = 0.01
	DefaultDriftFixed  = 2 * time.Millisecond
)

// The automatic node timeout (Config.NodeTimeout zero) is a fraction of
// the lease, within a floor and a cap: Redlock's rule that the timeout be
// small against the TTL, with a floor that a loaded machine meets. An
// operation without a TTL of its own (release, inspect) uses the timeout of
// the default bound lease, engine.DefaultBoundLease.
const (
	NodeTimeoutShare = 20 // the timeout is TTL/NodeTimeoutShare...
	MinNodeTimeout   = 250 * time.Millisecond
	MaxNodeTimeout   = 2 * time.Second
)

// carryFor is how long a rollback or release that a node did not answer is
// sent to it again, once per node timeout, until it answers.
const carryFor = time.Minute

// Config tunes a Redlock.
type Config struct {
	// NodeTimeout bounds each call to one node. Zero: TTL/20 within
	// [250ms, 2s] (see MinNodeTimeout).
	NodeTimeout time.Duration
	// DriftFactor is the clock drift allowed per unit of TTL (default 0.01).
	DriftFactor float64
	// DriftFixed is added to the drift allowance (default 2ms).
	DriftFixed time.Duration
	// MaxLease turns on Redlock's restart rule (see restart.go) when
	// positive: it is the longest lease any lockproxy sharing the nodes
	// grants or renews, and Acquire and Extend refuse a longer TTL
	// (ErrLeaseTooLong), so that it bounds every lease a node can have
	// held. A node that restarted without verified fsync is not counted
	// until MaxLease (and drift) after its start, and until its fencing
	// counters were raised. Zero: every answer counts, as if every node
	// kept every write across restarts.
	MaxLease time.Duration
	// StatusEvery is how often the nodes' run ids, uptimes and durability
	// are read under the restart rule (default 1s); an answer from a
	// process not yet vetted triggers a read at once.
	StatusEvery time.Duration
	// OnTrust, when set, is told when the restart rule stops or starts
	// counting node i, and why. It must be quick; it runs on the goroutine
	// that watches the nodes.
	OnTrust func(i int, counted bool, why string)
	// OnRepair, when set, is told of each repair of a node that drifted
	// apart under scripts run on every node, and of keys whose nodes
	// differ with no majority (repair.go). It must be quick; it runs on
	// the script's goroutines.
	OnRepair func(RepairEvent)
	// OnClockJump, when set, is told that node i's clock jumped by jump
	// (positive forward) and that it is held out for holdFor (clock.go).
	// It must be quick.
	OnClockJump func(i int, jump, holdFor time.Duration)
	// OnLost, when set, is told that token's lock on key, granted or
	// renewed through this Redlock, is no longer held by a majority of
	// counted nodes, and why (LostClockJumped). It must be quick.
	OnLost func(key, token, reason string)
}

// Redlock takes locks on a majority of independent nodes. It implements
// engine.Backend.
type Redlock struct {
	nodes  []Node
	quorum int
	cfg    Config
	health *health

	life context.Context // ended by Close: background work stops
	stop context.CancelFunc
	bg   sync.WaitGroup // background rollbacks and releases

	mu       sync.Mutex
	inflight map[grantID]pendingAcquire // grants whose acquires beyond the quorum are still in flight

	trust *trust      // nil: the restart rule is off (Config.MaxLease zero)
	clock *clockHolds // nodes whose clock jumped, and who vouches for the locks granted here (clock.go)

	healed atomic.Int64 // heals that took a lock again on a node (heal.go)

	order keyOrder  // scripts outside the catalog, one key at a time per node (eval.go)
	turns turnQueue // scripts that write, one turn at a time per key (turn.go)
}

type grantID struct{ key, token string }

// pendingAcquire is a grant's attempt while some of its acquires are in
// flight: a release marks it undone where it has not landed.
type pendingAcquire struct {
	attempt string
	ttl     time.Duration
}

var _ engine.Backend = (*Redlock)(nil)

// New returns a Redlock over nodes; a majority (len/2+1) decides.
func New(nodes []Node, cfg Config) *Redlock {
	if cfg.DriftFactor <= 0 {
		cfg.DriftFactor = DefaultDriftFactor
	}
	if cfg.DriftFixed <= 0 {
		cfg.DriftFixed = DefaultDriftFixed
	}
	q := len(nodes)/2 + 1
	r := &Redlock{nodes: nodes, quorum: q, cfg: cfg, health: newHealth(len(nodes), q), inflight: map[grantID]pendingAcquire{},
		clock: newClockHolds(len(nodes))}
	r.life, r.stop = context.WithCancel(context.Background())
	if cfg.MaxLease > 0 {
		r.startTrust()
	}
	return r
}

// timeout is the node timeout of an operation on a lease of ttl (zero: no
// TTL of its own).
func (r *Redlock) timeout(ttl time.Duration) time.Duration {
	if r.cfg.NodeTimeout > 0 {
		return r.cfg.NodeTimeout
	}
	if ttl <= 0 {
		ttl = engine.DefaultBoundLease
	}
	return min(max(ttl/NodeTimeoutShare, MinNodeTimeout), MaxNodeTimeout)
}

// settle remembers a grant whose acquires are still in flight until they
// land, so that a release marks them undone where they have not landed
// and a late acquire does not leave the key set after the holder let go.
// A grant whose majority agreed on the fence (no commit round) may find,
// among the late answers, a node that took the key with a lower counter
// (it missed grants of other keys), or that refreshed, for this attempt, a
// hold of the token it still had with a lower fence (it missed the
// release of an earlier grant): the fence is committed to that node, which
// raises its counter and the hold's fence to it. One that records a
// higher fence keeps it (commit says why).
func (r *Redlock) settle(key string, h engine.Hold, attempt string, c claimed) {
	calls := c.calls
	if calls.landed() {
		return
	}
	id, p := grantID{key, h.Token}, pendingAcquire{attempt, h.TTL}
	r.mu.Lock()
	r.inflight[id] = p
	r.mu.Unlock()
	var odd uint64 // bit i: node i took or refreshed the key with a lower fence
	r.afterward(calls, func(rep Reply) {
		if c.agreed && rep.Err == nil && (rep.Claim.State == Acquired || rep.Claim.State == Mine) && rep.Claim.Fence < c.fence {
			odd |= 1 << rep.Tag
		}
	}, func() {
		r.mu.Lock()
		if r.inflight[id] == p {
			delete(r.inflight, id)
		}
		r.mu.Unlock()
		if odd == 0 {
			return
		}
		r.bg.Go(func() {
			for i := range r.nodes {
				if odd&(1<<i) != 0 {
					_ = r.call(i, &Op{Kind: OpCommit, Key: key, Token: h.Token, Fence: c.fence, MetaFor: r.metaGrace()}, r.timeout(h.TTL))
				}
			}
		})
	})
}

// afterward hands the replies of f still to come to late and runs landed
// once they all came, both on the goroutines that deliver them (see
// flight.detach: neither may wait on a node); Close waits for landed.
func (r *Redlock) afterward(f *flight, late func(Reply), landed func()) {
	r.bg.Add(1)
	f.detach(late, func() {
		defer r.bg.Done()
		landed()
	})
}

// pending is the attempt of key's grant to token whose acquires may not
// have landed yet, if any.
func (r *Redlock) pending(key, token string) pendingAcquire {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight[grantID{key, token}]
}

// drift is the clock-drift allowance for a lease of ttl.
func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.cfg.DriftFactor) + r.cfg.DriftFixed
}

// validity is what remains of a lease of ttl taken at start.
func (r *Redlock) validity(ttl time.Duration, start time.Time) time.Duration {
	return ttl - time.Since(start) - r.drift(ttl)
}

// Close stops the background rollbacks and releases and waits for them;
// the nodes belong to the caller. A node that misses a rollback lets the
// lock expire with its lease.
func (r *Redlock) Close() error {
	r.stop()
	r.stopClock()
	r.bg.Wait()
	return nil
}
