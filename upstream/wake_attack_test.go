package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/tlstest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on branch wake: a node connection's read deadline is set once a
// batch and left set while idle; the reader passes over it (rearm) when
// no batch is late.

// doWithin runs op on n and fails the test if no reply comes within
// testTimeout (a reader that waits with no deadline never answers).
func doWithin(t *testing.T, ctx context.Context, n *RedisNode, op *quorum.Op) quorum.Reply {
	t.Helper()
	done := make(quorum.Replies, 1)
	n.Do(ctx, op, 0, done)
	select {
	case r := <-done:
		return r
	case <-time.After(testTimeout):
		t.Fatal("no reply: the call's batch has no read deadline")
		return quorum.Reply{}
	}
}

// Calls pushed just before, at and after the moment the last batch's
// deadline passes on the idle connection: each is answered, and the
// connection is replaced only after a call on it failed (a late batch),
// never while idle.
func TestWakeIdleDeadlineRacesTheNextBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		idleRace(t, RedisOptions{Addr: addr})
	})
}

// The same over TLS: a read that times out on the idle connection must
// leave the TLS connection usable.
func TestWakeIdleDeadlineRacesTheNextBatchTLS(t *testing.T) {
	s, cfg := tlsRedis(t)
	idleRace(t, RedisOptions{Addr: s.Addr(), TLSConfig: cfg})
}

// idleRace sends calls just before, at and after the moment the last
// batch's deadline passes on the idle connection.
func idleRace(t *testing.T, o RedisOptions) {
	const timeout = 30 * time.Millisecond
	o.Timeout = timeout
	n := newNode(t, o)
	ctx := testCtx(t)
	op := &quorum.Op{Kind: quorum.OpInspect, Key: "k"}
	prevOK := doWithin(t, ctx, n, op).Err == nil
	cn := n.current()
	failed, dropped := 0, 0
	for range 120 {
		time.Sleep(timeout - 5*time.Millisecond + time.Duration(rand.IntN(10_000))*time.Microsecond)
		r := doWithin(t, ctx, n, op)
		now := n.current()
		if now != cn && now != nil && r.Err == nil && prevOK {
			dropped++ // a new connection with no failed call before it
		}
		if r.Err != nil {
			failed++
		}
		prevOK, cn = r.Err == nil, now
	}
	if dropped > 0 {
		t.Fatalf("the idle connection was replaced %d times with no call failing on it (%d calls failed)", dropped, failed)
	}
	t.Logf("%d of 120 calls failed (late under load)", failed)
}

// A node stopped once the connection is idle, before or after the last
// batch's deadline passed: the next call's batch still gets its own
// deadline, its call fails by then, and the connection is replaced.
func TestWakeLateBatchAfterIdleBreaksTheConnection(t *testing.T) {
	for _, idle := range []time.Duration{0, 10 * time.Millisecond, 150 * time.Millisecond} {
		t.Run(fmt.Sprint("idle=", idle), func(t *testing.T) {
			s := redistest.Start(t, redistest.Options{})
			n := newNode(t, RedisOptions{Addr: s.Addr(), Timeout: 50 * time.Millisecond})
			op := &quorum.Op{Kind: quorum.OpInspect, Key: "k"}
			if r := doWithin(t, testCtx(t), n, op); r.Err != nil {
				t.Fatal(r.Err)
			}
			old := n.current()
			time.Sleep(idle)
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			defer s.Resume()
			short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			if r := doWithin(t, short, n, op); r.Err == nil {
				t.Fatalf("a call on a stopped node answered %+v", r)
			}
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
			if r := doWithin(t, testCtx(t), n, op); r.Err != nil {
				t.Fatal(r.Err)
			}
			if n.current() == old {
				t.Fatal("the connection whose batch was late is still the node's")
			}
		})
	}
}

// Grants, renewals and releases through three real nodes, one of them
// stopped and started again (SIGSTOP) now and then, so that acquires,
// renewals and releases land after their fan-out was decided and their
// replies, or their calls' timeouts, are handled by the node's reader
// (settle, heal, undo, carry): every call returns well before its
// context's end, and Close returns.
func TestWakeLateRepliesOnRealReaders(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{})
	nodes := make([]quorum.Node, len(servers))
	for i, s := range servers {
		nodes[i] = newNode(t, RedisOptions{Addr: s.Addr(), Timeout: 80 * time.Millisecond})
	}
	r := quorum.New(nodes, quorum.Config{NodeTimeout: 80 * time.Millisecond})
	stop := make(chan struct{})
	var pauser sync.WaitGroup
	pauser.Go(func() {
		defer servers[2].Resume()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rand.IntN(60)) * time.Millisecond):
			}
			_ = servers[2].Pause()
			time.Sleep(time.Duration(rand.IntN(120)) * time.Millisecond)
			_ = servers[2].Resume()
		}
	})
	const workers, rounds = 6, 2000
	var grants, fails atomic.Int64
	var dumpOnce sync.Once
	var wg sync.WaitGroup
	slow := make(chan string, workers*rounds*3)
	end := time.Now().Add(3 * time.Second) // bounded in time and count
	for c := range workers {
		wg.Go(func() {
			for i := range rounds {
				if time.Now().After(end) {
					return
				}
				key := fmt.Sprint("k", c)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				watch := time.AfterFunc(2*time.Second, func() { dumpOnce.Do(dumpStacks) })
				g, err := r.Acquire(ctx, key, hold(fmt.Sprint("t", c, "-", i), 2*time.Second))
				if ctx.Err() != nil { // not a node's call timing out: the caller's own end
					slow <- "acquire"
				}
				if err != nil {
					fails.Add(1)
				} else {
					grants.Add(1)
					// The caller's own end, as for the acquire: a node's
					// call timing out (80 ms) inside a no-quorum error is
					// not one.
					_, _ = r.Extend(ctx, key, g.Token, 2*time.Second, "")
					if ctx.Err() != nil {
						slow <- "extend"
					}
					_, _ = r.Release(ctx, key, g.Token, nil, nil)
					if ctx.Err() != nil {
						slow <- "release"
					}
				}
				watch.Stop()
				cancel()
			}
		})
	}
	wg.Wait()
	close(stop)
	pauser.Wait()
	close(slow)
	t.Logf("%d grants, %d refused or failed", grants.Load(), fails.Load())
	for op := range slow {
		t.Errorf("a%s slept to its context's end", map[bool]string{true: "n ", false: " "}[op[0] == 'a' || op[0] == 'e']+op)
	}
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(testTimeout):
		t.Fatal("Close hangs")
	}
}

func dumpStacks() {
	buf := make([]byte, 8<<20)
	_ = os.WriteFile("/tmp/attackw_stacks.txt", buf[:runtime.Stack(buf, true)], 0o644)
}

// A renewal's late answer from a node that lost the key is handled by the
// goroutine that delivers it: the heal still goes out (on a goroutine of
// its own) and takes the key there again; and Close, called while that
// answer is still to come, waits for it.
func TestWakeLateRenewalAnswerHealsAndCloseWaits(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("close=", closeFirst), func(t *testing.T) {
			servers, gated, r := extendGated(t)
			ctx := testCtx(t)
			g, err := r.Acquire(ctx, "k", hold("a", 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			heldOn(t, "k", "a", servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
			raw := rawClient(t, servers[2].Addr())
			if err := raw.Del(ctx, "k", DefaultPrefix+"meta:k").Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Extend(ctx, "k", g.Token, 5*time.Second, ""); err != nil {
				t.Fatal(err)
			}
			<-gated.pending
			closed := make(chan struct{})
			if closeFirst {
				go func() { r.Close(); close(closed) }()
				select {
				case <-closed:
					t.Fatal("Close returned while the renewal's last answer was still to come")
				case <-time.After(100 * time.Millisecond):
				}
			}
			gated.gate <- struct{}{}
			if rep := <-gated.landed; rep.Err != nil || rep.FreeAt <= 0 {
				t.Fatalf("the late renewal on the node that lost the key: %+v", rep)
			}
			if closeFirst {
				select {
				case <-closed:
				case <-time.After(testTimeout):
					t.Fatal("Close still waits once the last answer came")
				}
				return
			}
			eventually(t, testTimeout, "the heal from the late answer", func() bool { return r.Healed() == 1 })
			heldOn(t, "k", "a", servers[2].Addr())
		})
	}
}

// tlsRedis is a redis-server that serves TLS only, under a CA of its own,
// and the client config that trusts it.
func tlsRedis(t *testing.T) (*redistest.Server, *tls.Config) {
	t.Helper()
	ca := tlstest.NewCA(t, "test")
	srv := ca.Server(t, "server")
	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	return redistest.Start(t, redistest.Options{TLS: &redistest.TLS{CertFile: srv.Cert, KeyFile: srv.Key, CAFile: ca.File, Client: cfg}}), cfg
}
