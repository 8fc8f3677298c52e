package instance_test

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The Redisson replays send, byte for byte, what Redisson sends for RLock,
// RFairLock, RReadWriteLock and RSemaphore — its Lua scripts, taken from its
// own source (instance/testdata/redisson/SOURCES.md), with the KEYS and ARGV
// its Java code passes, by EVAL or (where the version's default
// useScriptCache is on) EVALSHA with its NOSCRIPT -> SCRIPT LOAD fallback,
// plus the plain commands around them (SUBSCRIBE to the lock's channel
// before waiting, EXISTS, PTTL, HGET, GET, DEL of the unlock latch) — and
// check every reply Redisson acts on. Redisson's Java dependencies are not
// available to the build, so the client is this replay, not Redisson.
//
// Redisson runs in single-server mode here (no replicas, so no WAIT after
// the scripts) with lockWatchdogTimeout shortened to rLeaseMS, which its
// Config allows (the default is 30 s): the watchdog renews every lease/3.
//
// Every case runs against one plain redis-server first (proving the
// checks), then against lockproxy over three redis-servers with both
// clients on one instance, and with the two clients on two instances over
// the same nodes (so an unlock message must cross instances).

// rLeaseMS is the replay's internalLockLeaseTime (Redisson's
// lockWatchdogTimeout), in milliseconds: long enough that no case outlives
// it on a loaded machine unless it means to.
const rLeaseMS = 10000

// rWatchdogLeaseMS is the lease of the watchdog case: short, so that the
// case outlives it several times.
const rWatchdogLeaseMS = 1500

//go:embed testdata/redisson
var redissonFS embed.FS

// rVersion is what differs between Redisson versions on the wire.
type rVersion struct {
	name string
	// scriptCache is Config.useScriptCache's default: EVALSHA first,
	// SCRIPT LOAD and EVALSHA again on NOSCRIPT; otherwise EVAL.
	scriptCache bool
	// pubArg: the scripts take the publish command ("publish") as an ARGV
	// instead of calling 'publish' themselves.
	pubArg bool
	// latchTimeoutMS > 0: unlock scripts take an unlock-latch key
	// (redisson_unlock_latch:{name}:<requestId>) and this timeout, and
	// unlock is followed by DEL redisson_unlock_latch:{name}:<id>.
	latchTimeoutMS int64
	// batchRenew: the watchdog renews many locks in one script
	// (LockTask: KEYS = names, ARGV = lease, lockName...) and gets an array.
	batchRenew bool
	// files maps an operation to its script file under the version's dir.
	files map[string]string
}

// rVersions are the replayed versions; SOURCES.md says where each script
// comes from.
var rVersions = []rVersion{
	{
		name: "3.12.0",
		files: map[string]string{
			"lock": "Lock.tryLockInnerAsync", "unlock": "Lock.unlockInnerAsync",
			"forceUnlock": "Lock.forceUnlockAsync", "renew": "Lock.renewExpirationAsync",
			"fair.lock": "FairLock.tryLockInnerAsync.long", "fair.unlock": "FairLock.unlockInnerAsync",
			"fair.acquireFailed": "FairLock.acquireFailedAsync",
			"read.lock":          "ReadLock.tryLockInnerAsync", "read.unlock": "ReadLock.unlockInnerAsync",
			"write.lock": "WriteLock.tryLockInnerAsync", "write.unlock": "WriteLock.unlockInnerAsync",
			"sem.trySetPermits": "Semaphore.trySetPermitsAsync", "sem.tryAcquire": "Semaphore.tryAcquireAsync",
			"sem.release": "Semaphore.releaseAsync",
		},
	},
	{
		name: "3.27.0", pubArg: true, latchTimeoutMS: (3000 + 1500) * 3,
		files: map[string]string{
			"lock": "Lock.tryLockInnerAsync", "unlock": "Lock.unlockInnerAsync",
			"forceUnlock": "Lock.forceUnlockAsync", "renew": "BaseLock.renewExpirationAsync",
			"fair.lock": "FairLock.tryLockInnerAsync.long", "fair.unlock": "FairLock.unlockInnerAsync",
			"fair.acquireFailed": "FairLock.acquireFailedAsync",
			"read.lock":          "ReadLock.tryLockInnerAsync", "read.unlock": "ReadLock.unlockInnerAsync",
			"write.lock": "WriteLock.tryLockInnerAsync", "write.unlock": "WriteLock.unlockInnerAsync",
			"sem.trySetPermits": "Semaphore.trySetPermitsAsync", "sem.tryAcquire": "Semaphore.tryAcquireAsync0",
			"sem.release": "Semaphore.releaseAsync",
		},
	},
	{
		name: "3.52.0", scriptCache: true, pubArg: true, latchTimeoutMS: (3000 + 2000) * 4, batchRenew: true,
		files: map[string]string{
			"lock": "Lock.tryLockInnerAsync", "unlock": "Lock.unlockInnerAsync",
			"forceUnlock": "Lock.forceUnlockAsync", "renew": "LockTask.renew",
			"fair.lock": "FairLock.tryLockInnerAsync.long", "fair.unlock": "FairLock.unlockInnerAsync",
			"fair.acquireFailed": "FairLock.acquireFailedAsync",
			"read.lock":          "ReadLock.tryLockInnerAsync", "read.unlock": "ReadLock.unlockInnerAsync",
			"write.lock": "WriteLock.tryLockInnerAsync", "write.unlock": "WriteLock.unlockInnerAsync",
			"sem.trySetPermits": "Semaphore.trySetPermitsAsync", "sem.tryAcquire": "Semaphore.tryAcquireAsync0",
			"sem.release": "Semaphore.releaseAsync",
		},
	},
}

// script is the exact text of op in this version.
func (v rVersion) script(t *testing.T, op string) string {
	t.Helper()
	b, err := redissonFS.ReadFile("testdata/redisson/" + v.name + "/" + v.files[op] + ".lua")
	if err != nil {
		t.Fatalf("%s %s: %v", v.name, op, err)
	}
	return string(b)
}

// rClient is one Redisson instance (its UUID "id") and one of its threads,
// on its own connection pool, with its own pub/sub connection.
type rClient struct {
	t      *testing.T
	v      rVersion
	c      *redis.Client
	id     string
	thread int64
	tg     rTarget // where it connects: what is guaranteed there
	nodes  []*redistest.Server
}

func newRClient(t *testing.T, v rVersion, addr string, n int) *rClient {
	return &rClient{t: t, v: v, c: newClient(t, addr, 2), id: fmt.Sprintf("6f1c2a3e-%04d-4d5e-9f00-%012d", n, time.Now().UnixNano()%1e12), thread: int64(40 + n)}
}

// lockName is Redisson's getLockName(threadId): id + ":" + threadId.
func (r *rClient) lockName() string { return fmt.Sprintf("%s:%d", r.id, r.thread) }

// eval sends script op as the version does and returns the reply; a nil
// reply is (nil, nil).
func (r *rClient) eval(ctx context.Context, op string, keys []string, args ...any) (any, error) {
	src := r.v.script(r.t, op)
	var v any
	var err error
	if r.v.scriptCache {
		sum := sha1.Sum([]byte(src))
		sha := hex.EncodeToString(sum[:])
		v, err = r.c.EvalSha(ctx, sha, keys, args...).Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			loaded, lerr := r.c.ScriptLoad(ctx, src).Result()
			if lerr != nil {
				return nil, fmt.Errorf("SCRIPT LOAD: %w", lerr)
			}
			if loaded != sha {
				return nil, fmt.Errorf("SCRIPT LOAD returned %s, Redisson computed %s", loaded, sha)
			}
			v, err = r.c.EvalSha(ctx, sha, keys, args...).Result()
		}
	} else {
		v, err = r.c.Eval(ctx, src, keys, args...).Result()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// pubArgs appends the publish command when the version passes it.
func (r *rClient) pubArgs(args ...any) []any {
	if r.v.pubArg {
		return append(args, "publish")
	}
	return args
}

// unlockEval runs an unlock script as Redisson sends it: from 3.2x on,
// with an unlock latch key (a fresh requestId) after keys and the latch
// timeout after args, then the latch's DEL (with the instance id, as
// Redisson does; it ignores the reply).
func (r *rClient) unlockEval(ctx context.Context, script, name string, keys []string, args ...any) (any, error) {
	latch := r.v.latchTimeoutMS > 0
	if latch {
		keys = append(keys, fmt.Sprintf("redisson_unlock_latch:{%s}:%x", name, time.Now().UnixNano()))
		args = append(args, r.v.latchTimeoutMS)
	}
	v, err := r.eval(ctx, script, keys, args...)
	if latch {
		if err := r.c.Del(ctx, fmt.Sprintf("redisson_unlock_latch:{%s}:%s", name, r.id)).Err(); err != nil {
			r.t.Logf("DEL unlock latch (Redisson ignores it): %v", err)
		}
	}
	return v, err
}

// --- RLock ---

// tryLock is tryLockInnerAsync: nil when acquired, else the holder's PTTL.
func (r *rClient) tryLock(ctx context.Context, name string, leaseMS int64) (any, error) {
	return r.eval(ctx, "lock", []string{name}, leaseMS, r.lockName())
}

// unlock is unlockInnerAsync: 1 released, 0 still held (reentrant), nil
// not held by this thread.
func (r *rClient) unlock(ctx context.Context, name string) (any, error) {
	return r.unlockEval(ctx, "unlock", name, []string{name, "redisson_lock__channel:{" + name + "}"},
		r.pubArgs(int64(0), int64(rLeaseMS), r.lockName())...)
}

// forceUnlock is forceUnlockAsync: 1 deleted, 0 not locked.
func (r *rClient) forceUnlock(ctx context.Context, name string) (any, error) {
	return r.eval(ctx, "forceUnlock", []string{name, "redisson_lock__channel:{" + name + "}"}, r.pubArgs(int64(0))...)
}

// renew is the watchdog's renewal: true while this thread holds name.
func (r *rClient) renew(ctx context.Context, name string, leaseMS int64) (bool, error) {
	v, err := r.eval(ctx, "renew", []string{name}, leaseMS, r.lockName())
	if err != nil {
		return false, err
	}
	if r.v.batchRenew {
		// LockTask's ContainsDecoder: 1 at i means KEYS[i] is still held.
		a, ok := v.([]any)
		if !ok || len(a) != 1 {
			return false, fmt.Errorf("renewal reply %#v, want a one-element array", v)
		}
		return a[0] == int64(1), nil
	}
	return v == int64(1), nil
}

// --- the checks ---

// rTarget is where a case's two clients connect.
type rTarget struct {
	name  string
	addrs func(t *testing.T) (a, b string, nodes []*redistest.Server)
	// quorum: lockproxy over three nodes, where the nodes run a script
	// each on its own (docs/lock-scripts.md, "Order on the nodes").
	quorum bool
}

// rTargets: one plain redis-server; lockproxy over three nodes with both
// clients on one instance; and with each client on its own instance over
// the same nodes.
var rTargets = []rTarget{
	{"redis", func(t *testing.T) (string, string, []*redistest.Server) {
		s := redistest.Start(t, redistest.Options{})
		return s.Addr(), s.Addr(), []*redistest.Server{s}
	}, false},
	{"lockproxy", func(t *testing.T) (string, string, []*redistest.Server) {
		nodes := redistest.StartN(t, 3, redistest.Options{})
		in := startInstance(t, testConfig(nodes))
		return in.Addr(), in.Addr(), nodes
	}, true},
	{"lockproxy-two-instances", func(t *testing.T) (string, string, []*redistest.Server) {
		nodes := redistest.StartN(t, 3, redistest.Options{})
		cfg := testConfig(nodes)
		return startInstance(t, cfg).Addr(), startInstance(t, cfg).Addr(), nodes
	}, true},
}

// rCase is one replayed scenario.
type rCase struct {
	name string
	run  func(t *testing.T, a, b *rClient)
}

// TestRedissonReplay runs every case for every version on every target.
func TestRedissonReplay(t *testing.T) {
	for _, tg := range rTargets {
		t.Run(tg.name, func(t *testing.T) {
			addrA, addrB, nodes := tg.addrs(t)
			for _, v := range rVersions {
				t.Run(v.name, func(t *testing.T) {
					for i, c := range rCases {
						t.Run(c.name, func(t *testing.T) {
							a, b := newRClient(t, v, addrA, 2*i), newRClient(t, v, addrB, 2*i+1)
							a.tg, b.tg, a.nodes, b.nodes = tg, tg, nodes, nodes
							c.run(t, a, b)
						})
					}
				})
			}
		})
	}
}

var rCases = []rCase{
	{"RLock/tryLock-reentrant-unlock", caseReentrant},
	{"RLock/waiter-woken-by-unlock-message", caseWaiterWoken},
	{"RLock/watchdog-renewal", caseWatchdog},
	{"RLock/lease-expires", caseLeaseExpires},
	{"RLock/forceUnlock", caseForceUnlock},
	{"RLock/contention-one-holder", caseContention},
	{"RFairLock/queue-order", caseFairOrder},
	{"RReadWriteLock/readers-share-writer-excludes", caseReadWrite},
	{"RSemaphore/permits", caseSemaphore},
	{"RSemaphore/contention-one-permit", caseSemaphoreContention}, // two instances too: the turn keeps the nodes alike
}

// rKey is a unique lock name per case (hash tags are what Redisson's
// derived names add around it).
func rKey(t *testing.T) string { return "redisson:" + uniqueKey(t) }

// want fails the test unless got equals want (nil meaning a nil reply).
func want(t *testing.T, what string, got any, err error, wantV any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: error %v, want %#v", what, err, wantV)
	}
	if got != wantV {
		t.Fatalf("%s: got %#v, want %#v", what, got, wantV)
	}
}

// wantSoft is want for the plain commands Redisson sends beside its
// scripts: a wrong reply is an error, and the case goes on so that one
// unserved command does not hide the script checks after it.
func wantSoft(t *testing.T, what string, got any, err error, wantV any) {
	t.Helper()
	if err != nil || got != wantV {
		t.Errorf("%s: got %#v (error %v), want %#v", what, got, err, wantV)
	}
}

// wantTTL fails the test unless got is a remaining time Redisson would act
// on: an integer in (0, max] ms.
func wantTTL(t *testing.T, what string, got any, err error, max int64) int64 {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: error %v, want a PTTL", what, err)
	}
	n, ok := got.(int64)
	if !ok || n <= 0 || n > max {
		t.Fatalf("%s: got %#v, want a remaining time in (0, %d]", what, got, max)
	}
	return n
}

// documented is an outcome that docs/lock-scripts.md ("Order on the nodes")
// says the nodes can give once their states drifted apart; where the
// target allows it, a case logs it and checks the weaker guarantee.
type documented string

func (d documented) Error() string { return string(d) }

// disagreed reports whether err is lockproxy's NOQUORUM for nodes whose
// replies had no majority.
func disagreed(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOQUORUM the nodes disagreed")
}

// unlockDrifted checks the reply to an unlock Redisson expects to be 1 (a
// release) after a lease expired while another client retried: with the
// nodes' states drifted apart (a quorum target only), 0 (a hold count left
// on some nodes) or NOQUORUM may come instead; then the hold left behind
// must end with its lease: once the key is gone from every node (read on
// the nodes themselves, within a few leases), a fresh client (a thread of
// other's Redisson instance) gets the lock at once and releases it.
func unlockDrifted(t *testing.T, what string, v any, err error, name string, other *rClient) {
	t.Helper()
	if err == nil && v == int64(1) {
		return
	}
	if !other.tg.quorum || !(disagreed(err) || err == nil && v == int64(0)) {
		t.Fatalf("%s: got %#v (error %v), want 1", what, v, err)
	}
	t.Logf("%s: %#v %v: the nodes' states drifted (documented); waiting for the hold left behind to expire", what, v, err)
	other = &rClient{t: t, v: other.v, c: other.c, id: other.id, thread: other.thread + 1000, tg: other.tg, nodes: other.nodes}
	// An unlock that left a count sets the lease rLeaseMS again.
	within := 3*rLeaseMS*time.Millisecond + compatWaitBound
	ctx, cancel := context.WithTimeout(context.Background(), within+compatWaitBound)
	defer cancel()
	direct := make([]*redis.Client, len(other.nodes))
	for i, n := range other.nodes {
		direct[i] = nodeClient(t, n)
	}
	eventually(t, within, "the drifted hold expires on every node", func() bool {
		for _, nc := range direct {
			if c, err := nc.Exists(ctx, name).Result(); err != nil || c != 0 {
				return false
			}
		}
		return true
	})
	v, err = other.tryLock(ctx, name, rLeaseMS)
	want(t, "a fresh client's tryLock once the drifted hold expired", v, err, nil)
	v, err = other.unlock(ctx, name)
	want(t, "the other client's unlock once the drifted hold expired", v, err, int64(1))
}

func caseReentrant(t *testing.T, a, b *rClient) {
	ctx := compatCtx(t)
	name := rKey(t)
	v, err := a.tryLock(ctx, name, rLeaseMS)
	want(t, "A tryLock", v, err, nil)
	v, err = b.tryLock(ctx, name, rLeaseMS)
	wantTTL(t, "B tryLock while A holds", v, err, rLeaseMS)
	v, err = a.tryLock(ctx, name, rLeaseMS)
	want(t, "A reentrant tryLock", v, err, nil)
	// getHoldCount: HGET name lockName.
	hc, err := a.c.HGet(ctx, name, a.lockName()).Result()
	wantSoft(t, "A getHoldCount (HGET)", hc, err, "2")
	// isHeldByThread: HEXISTS.
	held, err := b.c.HExists(ctx, name, b.lockName()).Result()
	wantSoft(t, "B isHeldByThread (HEXISTS)", held, err, false)
	held, err = a.c.HExists(ctx, name, a.lockName()).Result()
	wantSoft(t, "A isHeldByThread (HEXISTS)", held, err, true)
	v, err = b.unlock(ctx, name)
	want(t, "B unlock (not the holder)", v, err, nil)
	v, err = a.unlock(ctx, name)
	want(t, "A first unlock of two", v, err, int64(0))
	n, err := b.c.Exists(ctx, name).Result()
	want(t, "isLocked (EXISTS) after one unlock", n, err, int64(1))
	v, err = a.unlock(ctx, name)
	want(t, "A second unlock", v, err, int64(1))
	n, err = b.c.Exists(ctx, name).Result()
	want(t, "isLocked (EXISTS) after release", n, err, int64(0))
	v, err = a.unlock(ctx, name)
	want(t, "A unlock when not held", v, err, nil)
	v, err = b.tryLock(ctx, name, rLeaseMS)
	want(t, "B tryLock after release", v, err, nil)
	pttl, err := a.c.PTTL(ctx, name).Result()
	if err != nil || pttl <= 0 || pttl > rLeaseMS*time.Millisecond {
		t.Fatalf("remainTimeToLive (PTTL) while B holds: %v %v, want in (0, %d ms]", pttl, err, rLeaseMS)
	}
	v, err = b.unlock(ctx, name)
	want(t, "B unlock", v, err, int64(1))
	pttl, err = a.c.PTTL(ctx, name).Result()
	want(t, "remainTimeToLive (PTTL) after release", pttl, err, time.Duration(-2))
}

// subscribe is Redisson's subscribe before waiting: SUBSCRIBE on its
// pub/sub connection, confirmed before it retries.
func (r *rClient) subscribe(ctx context.Context, channel string) *redis.PubSub {
	r.t.Helper()
	ps := r.c.Subscribe(ctx, channel)
	r.t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		r.t.Fatalf("SUBSCRIBE %s: %v", channel, err)
	}
	return ps
}

// awaitMessage waits (at most within) for a message on ps and returns its
// payload; ok is false when none came.
func awaitMessage(ps *redis.PubSub, within time.Duration) (string, bool) {
	select {
	case m := <-ps.Channel():
		return m.Payload, true
	case <-time.After(within):
		return "", false
	}
}

// rWaitLeaseMS is A's lease in the waiter case (tryLock(wait, lease)):
// long, so that B acquiring before it runs out proves the message woke B.
const rWaitLeaseMS = 20000

func caseWaiterWoken(t *testing.T, a, b *rClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*rWaitLeaseMS*time.Millisecond)
	defer cancel()
	name := rKey(t)
	granted := time.Now()
	v, err := a.tryLock(ctx, name, rWaitLeaseMS)
	want(t, "A tryLock", v, err, nil)
	// B: tryLock(waitTime, -1): refused with a ttl, subscribes, retries.
	v, err = b.tryLock(ctx, name, rLeaseMS)
	ttl := wantTTL(t, "B tryLock", v, err, rWaitLeaseMS)
	ps := b.subscribe(ctx, "redisson_lock__channel:{"+name+"}")
	v, err = b.tryLock(ctx, name, rLeaseMS)
	wantTTL(t, "B tryLock after subscribing", v, err, rWaitLeaseMS)
	done := compatReleaseLater(func() error {
		v, err := a.unlock(ctx, name)
		if err != nil || v != int64(1) {
			return fmt.Errorf("A unlock: %#v %v", v, err)
		}
		return nil
	})
	// B waits on the latch for at most ttl; the message must come first
	// (A's unlock is awaited first only so that a failed unlock ends the
	// case at once: the message cannot come before it).
	compatWaitRelease(t, done)
	msg, ok := awaitMessage(ps, time.Duration(ttl)*time.Millisecond)
	if !ok {
		t.Fatal("B: no unlock message on redisson_lock__channel")
	}
	if msg != "0" {
		t.Fatalf("B: unlock message %q, want %q (LockPubSub.UNLOCK_MESSAGE)", msg, "0")
	}
	v, err = b.tryLock(ctx, name, rLeaseMS)
	want(t, "B tryLock after the message", v, err, nil)
	// Woken by the message, not by A's lease running out.
	if el := time.Since(granted); el >= rWaitLeaseMS*time.Millisecond {
		t.Fatalf("B acquired %v after A's grant, not before A's %d ms lease ran out", el, rWaitLeaseMS)
	}
	v, err = b.unlock(ctx, name)
	want(t, "B unlock", v, err, int64(1))
}

func caseWatchdog(t *testing.T, a, b *rClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := rKey(t)
	lease := rWatchdogLeaseMS * time.Millisecond
	// sent is when the last grant or renewal was sent: the lock is held
	// at least until sent+lease. Past that, a stalled machine may have let
	// it expire, and the case stops checking (it says so).
	sent := time.Now()
	v, err := a.tryLock(ctx, name, rWatchdogLeaseMS)
	want(t, "A lock", v, err, nil)
	start := time.Now()
	// The watchdog renews every lease/3; the lock outlives its lease
	// three times over.
	for time.Since(start) < 3*lease {
		time.Sleep(lease / 3)
		at := time.Now()
		ok, err := a.renew(ctx, name, rWatchdogLeaseMS)
		if err != nil {
			t.Fatalf("watchdog renewal: %v", err)
		}
		if !ok {
			if time.Since(sent) < lease {
				t.Fatalf("watchdog renewal refused %v after the last renewal was sent, within the %v lease", time.Since(sent), lease)
			}
			t.Logf("renewal came %v after the last one (lease %v): the machine stalled; stopping here", at.Sub(sent), lease)
			return
		}
		sent = at
		v, err = b.tryLock(ctx, name, rWatchdogLeaseMS)
		if err == nil && v == nil {
			if time.Since(sent) < lease {
				t.Fatalf("B acquired %v after A's renewal was sent, within the %v lease", time.Since(sent), lease)
			}
			t.Logf("B's tryLock came %v after A's renewal (lease %v): the machine stalled; stopping here", time.Since(sent), lease)
			return
		}
		wantTTL(t, "B tryLock while A's watchdog renews", v, err, rWatchdogLeaseMS)
	}
	ok, err := b.renew(ctx, name, rWatchdogLeaseMS)
	want(t, "B's renewal of A's lock", ok, err, false)
	// A's process "dies": no more renewals; the lock expires by itself.
	eventually(t, 20*lease, "A's unrenewed lock expires", func() bool {
		v, err := b.tryLock(ctx, name, rWatchdogLeaseMS)
		return err == nil && v == nil
	})
	ok, err = a.renew(ctx, name, rWatchdogLeaseMS)
	want(t, "A's renewal after losing the lock", ok, err, false)
	v, err = b.unlock(ctx, name)
	unlockDrifted(t, "B unlock", v, err, name, a)
}

func caseLeaseExpires(t *testing.T, a, b *rClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := rKey(t)
	const leaseMS = 800
	sent := time.Now()
	v, err := a.tryLock(ctx, name, leaseMS) // tryLock(wait, 800, ms): no watchdog
	want(t, "A tryLock with lease", v, err, nil)
	v, err = b.tryLock(ctx, name, leaseMS)
	switch {
	case err == nil && v == nil && time.Since(sent) < leaseMS*time.Millisecond:
		t.Fatalf("B acquired %v after A's grant was sent, within A's %d ms lease", time.Since(sent), leaseMS)
	case err == nil && v == nil:
		t.Logf("B's tryLock came %v after A's grant (lease %d ms): the machine stalled", time.Since(sent), leaseMS)
	default:
		wantTTL(t, "B tryLock", v, err, leaseMS)
		eventually(t, 30*time.Second, "A's lease expires and B acquires", func() bool {
			v, err := b.tryLock(ctx, name, leaseMS)
			return err == nil && v == nil
		})
	}
	v, err = a.unlock(ctx, name)
	want(t, "A unlock after expiry", v, err, nil)
	v, err = b.unlock(ctx, name)
	unlockDrifted(t, "B unlock", v, err, name, a)
}

func caseForceUnlock(t *testing.T, a, b *rClient) {
	ctx := compatCtx(t)
	name := rKey(t)
	v, err := a.tryLock(ctx, name, rLeaseMS)
	want(t, "A tryLock", v, err, nil)
	v, err = a.tryLock(ctx, name, rLeaseMS)
	want(t, "A reentrant tryLock", v, err, nil)
	ps := b.subscribe(ctx, "redisson_lock__channel:{"+name+"}")
	v, err = b.forceUnlock(ctx, name)
	want(t, "B forceUnlock", v, err, int64(1))
	if msg, ok := awaitMessage(ps, compatWaitBound); !ok || msg != "0" {
		t.Fatalf("forceUnlock's message: %q %v, want \"0\"", msg, ok)
	}
	n, err := a.c.Exists(ctx, name).Result()
	want(t, "isLocked after forceUnlock", n, err, int64(0))
	v, err = b.forceUnlock(ctx, name)
	want(t, "forceUnlock of a free lock", v, err, int64(0))
	v, err = b.tryLock(ctx, name, rLeaseMS)
	want(t, "B tryLock after forceUnlock", v, err, nil)
	v, err = a.unlock(ctx, name)
	want(t, "A unlock after being forced out", v, err, nil)
	v, err = b.unlock(ctx, name)
	want(t, "B unlock", v, err, int64(1))
}

// rContentionRounds bounds the contention cases: each client tries this
// many times.
const rContentionRounds = 40

// contend runs try and release in a and b concurrently, rContentionRounds
// times each (bounded by compatWaitBound x 4), and fails the test if the
// two ever hold at once or if an error or an unexpected reply occurs,
// other than a documented one (logged and counted: a documented try is not
// a grant; after a documented release the holder stops holding). It
// returns how many times each got it.
func contend(t *testing.T, try func(ctx context.Context, r *rClient) (bool, error), release func(ctx context.Context, r *rClient) error, a, b *rClient) [2]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*compatWaitBound)
	defer cancel()
	var holders atomic.Int32
	var got, drifted [2]int
	errs := make(chan error, 2)
	for i, r := range []*rClient{a, b} {
		go func() {
			errs <- func() error {
				for range rContentionRounds {
					ok, err := try(ctx, r)
					var d documented
					if errors.As(err, &d) {
						drifted[i]++
						continue
					}
					if err != nil {
						return err
					}
					if !ok {
						continue
					}
					got[i]++
					if n := holders.Add(1); n != 1 {
						return fmt.Errorf("%d holders at once", n)
					}
					time.Sleep(time.Millisecond)
					holders.Add(-1)
					if err := release(ctx, r); errors.As(err, &d) {
						drifted[i]++
					} else if err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got[0]+got[1] == 0 {
		t.Error("neither client ever got it")
	}
	if drifted[0]+drifted[1] > 0 {
		t.Logf("documented outcomes of drifted nodes: A %d, B %d", drifted[0], drifted[1])
	}
	return got
}

// caseContention: two clients contend for one RLock. Through two
// instances too, the nodes run the scripts on the key in one order (the
// turn, docs/lock-scripts.md "Order on the nodes"), so every tryLock and
// unlock gets the reply one Redis would give: no NOQUORUM, no unlock
// answering 0 or nil.
func caseContention(t *testing.T, a, b *rClient) {
	name := rKey(t)
	got := contend(t, func(ctx context.Context, r *rClient) (bool, error) {
		v, err := r.tryLock(ctx, name, rLeaseMS)
		if err != nil {
			return false, err
		}
		if v == nil {
			return true, nil
		}
		if n, ok := v.(int64); !ok || n <= 0 || n > rLeaseMS {
			return false, fmt.Errorf("tryLock: %#v, want nil or a PTTL in (0, %d]", v, rLeaseMS)
		}
		return false, nil
	}, func(ctx context.Context, r *rClient) error {
		v, err := r.unlock(ctx, name)
		if err == nil && v == int64(1) {
			return nil
		}
		return fmt.Errorf("unlock: %#v %v, want 1", v, err)
	}, a, b)
	t.Logf("grants: A %d, B %d of %d tries each", got[0], got[1], rContentionRounds)
	nodesAlike(t, a.nodes, name)
}

// nodesAlike checks that every node ends up holding what one Redis would
// (the value the first node holds; the last node may still be running the
// last script when its reply came from the others), read on the nodes.
func nodesAlike(t *testing.T, nodes []*redistest.Server, name string) {
	t.Helper()
	if len(nodes) < 2 {
		return
	}
	dump := func(n *redistest.Server) string {
		v, err := nodeClient(t, n).Dump(compatCtx(t), name).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("DUMP %s on %s: %v", name, n.Addr(), err)
		}
		return v
	}
	var got []string
	eventually(t, compatWaitBound, "every node holds the same "+name, func() bool {
		got = got[:0]
		for _, n := range nodes {
			got = append(got, dump(n))
		}
		for _, g := range got[1:] {
			if g != got[0] {
				return false
			}
		}
		return true
	})
}

func caseSemaphoreContention(t *testing.T, a, b *rClient) {
	name := rKey(t)
	v, err := a.semSet(compatCtx(t), name, 1)
	want(t, "trySetPermits(1)", v, err, int64(1))
	got := contend(t, func(ctx context.Context, r *rClient) (bool, error) {
		v, err := r.semAcquire(ctx, name)
		if err != nil || (v != int64(0) && v != int64(1)) {
			return false, fmt.Errorf("tryAcquire: %#v %v, want 0 or 1", v, err)
		}
		return v == int64(1), nil
	}, func(ctx context.Context, r *rClient) error {
		_, err := r.semRelease(ctx, name)
		return err
	}, a, b)
	avail, err := a.c.Get(compatCtx(t), name).Result()
	if err != nil || avail != "1" {
		t.Fatalf("permits at the end: %q %v, want \"1\"", avail, err)
	}
	nodesAlike(t, a.nodes, name)
	t.Logf("acquired: A %d, B %d of %d tries each", got[0], got[1], rContentionRounds)
}

// --- RFairLock ---

// fairKeys are the fair lock's KEYS for tryLock: name, queue, timeout set.
func fairKeys(name string) []string {
	return []string{name, "redisson_lock_queue:{" + name + "}", "redisson_lock_timeout:{" + name + "}"}
}

// fairWaitMS is the wait time the replay passes (tryLock's waitTime).
const fairWaitMS = 5000

func (r *rClient) fairLock(ctx context.Context, name string) (any, error) {
	return r.eval(ctx, "fair.lock", fairKeys(name), int64(rLeaseMS), r.lockName(), int64(fairWaitMS), time.Now().UnixMilli())
}

func (r *rClient) fairUnlock(ctx context.Context, name string) (any, error) {
	return r.unlockEval(ctx, "fair.unlock", name, append(fairKeys(name), "redisson_lock__channel:{"+name+"}"),
		r.pubArgs(int64(0), int64(rLeaseMS), r.lockName(), time.Now().UnixMilli())...)
}

func caseFairOrder(t *testing.T, a, b *rClient) {
	ctx := compatCtx(t)
	name := rKey(t)
	// A third thread of B's Redisson instance, on A's address: the queue
	// needs two waiters.
	c := &rClient{t: t, v: b.v, c: a.c, id: b.id, thread: b.thread + 100, tg: b.tg, nodes: b.nodes}
	v, err := a.fairLock(ctx, name)
	want(t, "A fair tryLock", v, err, nil)
	psB := b.subscribe(ctx, "redisson_lock__channel:{"+name+"}:"+b.lockName())
	v, err = b.fairLock(ctx, name)
	wantTTL(t, "B fair tryLock (queued first)", v, err, rLeaseMS)
	psC := c.subscribe(ctx, "redisson_lock__channel:{"+name+"}:"+c.lockName())
	v, err = c.fairLock(ctx, name)
	if err != nil || v == nil {
		t.Fatalf("C fair tryLock (queued second): %#v %v, want a wait time", v, err)
	}
	v, err = a.fairUnlock(ctx, name)
	want(t, "A fair unlock", v, err, int64(1))
	if msg, ok := awaitMessage(psB, compatWaitBound); !ok || msg != "0" {
		t.Fatalf("B's unlock message: %q %v, want \"0\"", msg, ok)
	}
	// C is not first: it must not get the lock, even though it is free.
	v, err = c.fairLock(ctx, name)
	if err != nil || v == nil {
		t.Fatalf("C fair tryLock out of turn: %#v %v, want a wait time", v, err)
	}
	v, err = b.fairLock(ctx, name)
	want(t, "B fair tryLock in turn", v, err, nil)
	v, err = b.fairUnlock(ctx, name)
	want(t, "B fair unlock", v, err, int64(1))
	if msg, ok := awaitMessage(psC, compatWaitBound); !ok || msg != "0" {
		t.Fatalf("C's unlock message: %q %v, want \"0\"", msg, ok)
	}
	v, err = c.fairLock(ctx, name)
	want(t, "C fair tryLock in turn", v, err, nil)
	v, err = c.fairUnlock(ctx, name)
	want(t, "C fair unlock", v, err, int64(1))
	n, err := a.c.Exists(ctx, name).Result()
	want(t, "isLocked (EXISTS) at the end", n, err, int64(0))
}

// --- RReadWriteLock ---

func (r *rClient) readLock(ctx context.Context, name string) (any, error) {
	return r.eval(ctx, "read.lock", []string{name, "{" + name + "}:" + r.lockName() + ":rwlock_timeout"},
		int64(rLeaseMS), r.lockName(), r.lockName()+":write")
}

func (r *rClient) readUnlock(ctx context.Context, name string) (any, error) {
	keys := []string{name, "redisson_rwlock:{" + name + "}", "{" + name + "}:" + r.lockName() + ":rwlock_timeout", "{" + name + "}"}
	return r.unlockEval(ctx, "read.unlock", name, keys, r.pubArgs(int64(0), r.lockName())...)
}

func (r *rClient) writeLock(ctx context.Context, name string) (any, error) {
	return r.eval(ctx, "write.lock", []string{name}, int64(rLeaseMS), r.lockName()+":write")
}

func (r *rClient) writeUnlock(ctx context.Context, name string) (any, error) {
	return r.unlockEval(ctx, "write.unlock", name, []string{name, "redisson_rwlock:{" + name + "}"},
		r.pubArgs(int64(1), int64(rLeaseMS), r.lockName()+":write")...)
}

func caseReadWrite(t *testing.T, a, b *rClient) {
	ctx := compatCtx(t)
	name := rKey(t)
	v, err := a.readLock(ctx, name)
	want(t, "A readLock", v, err, nil)
	v, err = b.readLock(ctx, name)
	want(t, "B readLock (readers share)", v, err, nil)
	v, err = b.writeLock(ctx, name)
	wantTTL(t, "B writeLock while two read", v, err, rLeaseMS)
	n, err := a.c.Exists(ctx, name).Result()
	want(t, "read lock isLocked (EXISTS)", n, err, int64(1))
	ps := b.subscribe(ctx, "redisson_rwlock:{"+name+"}")
	v, err = a.readUnlock(ctx, name)
	want(t, "A readUnlock (B still reads)", v, err, int64(0))
	v, err = b.writeLock(ctx, name)
	wantTTL(t, "B writeLock while B reads", v, err, rLeaseMS)
	v, err = b.readUnlock(ctx, name)
	want(t, "B readUnlock (last reader)", v, err, int64(1))
	if msg, ok := awaitMessage(ps, compatWaitBound); !ok || msg != "0" {
		t.Fatalf("last reader's unlock message: %q %v, want \"0\"", msg, ok)
	}
	v, err = b.writeLock(ctx, name)
	want(t, "B writeLock when free", v, err, nil)
	v, err = a.readLock(ctx, name)
	wantTTL(t, "A readLock while B writes", v, err, rLeaseMS)
	v, err = a.writeLock(ctx, name)
	wantTTL(t, "A writeLock while B writes", v, err, rLeaseMS)
	mode, err := a.c.HGet(ctx, name, "mode").Result()
	wantSoft(t, "write lock isLocked (HGET name mode)", mode, err, "write")
	v, err = a.writeUnlock(ctx, name)
	want(t, "A writeUnlock (not the writer)", v, err, nil)
	v, err = b.writeUnlock(ctx, name)
	want(t, "B writeUnlock", v, err, int64(1))
	if msg, ok := awaitMessage(ps, compatWaitBound); !ok || msg != "1" {
		t.Fatalf("writer's unlock message: %q %v, want \"1\" (READ_UNLOCK_MESSAGE)", msg, ok)
	}
	n, err = a.c.Exists(ctx, name).Result()
	want(t, "EXISTS after all unlocks", n, err, int64(0))
}

// --- RSemaphore ---

func (r *rClient) semSet(ctx context.Context, name string, permits int64) (any, error) {
	return r.eval(ctx, "sem.trySetPermits", []string{name, "redisson_sc:{" + name + "}"}, r.pubArgs(permits)...)
}

func (r *rClient) semAcquire(ctx context.Context, name string) (any, error) {
	return r.eval(ctx, "sem.tryAcquire", []string{name}, int64(1))
}

func (r *rClient) semRelease(ctx context.Context, name string) (any, error) {
	return r.eval(ctx, "sem.release", []string{name, "redisson_sc:{" + name + "}"}, r.pubArgs(int64(1))...)
}

func caseSemaphore(t *testing.T, a, b *rClient) {
	ctx := compatCtx(t)
	name := rKey(t)
	v, err := a.semSet(ctx, name, 2)
	want(t, "trySetPermits(2)", v, err, int64(1))
	v, err = b.semSet(ctx, name, 5)
	want(t, "trySetPermits(5) when set", v, err, int64(0))
	v, err = a.semAcquire(ctx, name)
	want(t, "A tryAcquire", v, err, int64(1))
	v, err = b.semAcquire(ctx, name)
	want(t, "B tryAcquire", v, err, int64(1))
	v, err = a.semAcquire(ctx, name)
	want(t, "A tryAcquire with no permit left", v, err, int64(0))
	avail, err := a.c.Get(ctx, name).Result()
	want(t, "availablePermits (GET)", avail, err, "0")
	ps := a.subscribe(ctx, "redisson_sc:{"+name+"}")
	v, err = a.semAcquire(ctx, name)
	want(t, "A tryAcquire after subscribing", v, err, int64(0))
	done := compatReleaseLater(func() error {
		_, err := b.semRelease(ctx, name)
		return err
	})
	msg, ok := awaitMessage(ps, compatWaitBound)
	compatWaitRelease(t, done)
	if !ok || msg != "1" {
		t.Fatalf("A: release message %q %v, want \"1\" (the permits now available)", msg, ok)
	}
	v, err = a.semAcquire(ctx, name)
	want(t, "A tryAcquire after the release", v, err, int64(1))
	avail, err = a.c.Get(ctx, name).Result()
	want(t, "availablePermits at the end", avail, err, "0")
}
