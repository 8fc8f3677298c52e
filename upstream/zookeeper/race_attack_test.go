package zookeeper

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/zktest"
)

// The attacks of the changes that run a request on the caller's goroutine
// when its deadline is past 3/4 of the session timeout (races), that
// start no goroutine after a lone batched call, and that set a handoff's
// watch on one goroutine.

// TestZKAttackUnracedCreateLost: a LOCK whose deadline is just past 3/4
// of the session timeout (so not raced: its requests run on the caller's
// goroutine) sends its create, and the server stops answering (a
// blackholed link: a paused server, as the client sees it) or the
// connection is cut. The call returns by its deadline — the receive
// timeout fails the pending create first — and as an unknown outcome,
// never "not granted".
func TestZKAttackUnracedCreateLost(t *testing.T) {
	for _, fault := range []string{"paused", "cut"} {
		t.Run(fault, func(t *testing.T) {
			srv := zktest.Start(t)
			link := newSlowLink(t, srv.Addr())
			a := newTimedZK(t, link.cut.Addr())
			key := "lost-" + fault
			wait := sessionTimeout*3/4 + 300*time.Millisecond
			ctx, cancel := context.WithTimeout(testCtx(t), wait)
			defer cancel()
			if a.races(ctx) {
				t.Fatalf("a call with %v left is raced; the attack wants one that is not", wait)
			}
			switch fault {
			case "paused":
				link.delay.SetBlackhole(true)
				t.Cleanup(func() { link.delay.SetBlackhole(false) })
			case "cut":
				link.delay.SetDelay(500 * time.Millisecond)
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := a.Acquire(ctx, key, hold("T", 20*time.Second))
				done <- err
			}()
			if fault == "cut" {
				time.Sleep(200 * time.Millisecond) // the create on the slow link
				link.cut.Cut()
				t.Cleanup(link.cut.Restore)
			}
			select { // bounded well under a reconnection's handshake (ten receive timeouts)
			case err := <-done:
				t.Logf("answered after %v: %v", time.Since(start).Round(time.Millisecond), err)
				if !errors.Is(err, engine.ErrOutcomeUnknown) {
					t.Fatalf("LOCK whose create's reply was lost: %v; want an unknown outcome", err)
				}
			case <-time.After(wait + 5*time.Second):
				t.Fatalf("LOCK with a %v deadline not answered 5s after it", wait)
			}
		})
	}
}

// TestZKAttackUnracedStepWhileReconnecting: a LOCK with a deadline well
// past 3/4 of the session timeout creates its node behind another
// instance's lock; then the server stops answering (a blackholed link: a
// paused server, as the client sees it), the session's connection times
// out, and go-zookeeper dials again, which succeeds, and waits for the
// server's answer to its handshake, up to ten receive timeouts. The
// call's next step (the listing) is queued meanwhile, with more than 3/4
// of the session timeout left: it must still return by its deadline, not
// when the handshake gives up.
func TestZKAttackUnracedStepWhileReconnecting(t *testing.T) {
	srv := zktest.Start(t)
	link := newSlowLink(t, srv.Addr())
	a := newTimedZK(t, link.delay.Addr())
	b := newTimedZK(t, srv.Addr())
	key := "reconnecting"
	mustGrant(t, b, key, hold("B", 30*time.Second))
	t.Cleanup(func() { link.delay.SetBlackhole(false) })
	a.createReturned = func(string) {
		link.delay.SetBlackhole(true)
		eventually(t, 10*time.Second, "the connection timed out", func() bool { return !a.Connected() })
		time.Sleep(200 * time.Millisecond) // dialled again: the handshake waits
	}
	wait := sessionTimeout*3/4 + sessionTimeout*2/3 + time.Second
	ctx, cancel := context.WithTimeout(testCtx(t), wait)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := a.Acquire(ctx, key, hold("T", 20*time.Second))
		done <- err
	}()
	select { // bounded well under the handshake's wait (ten receive timeouts)
	case err := <-done:
		t.Logf("answered after %v: %v", time.Since(start).Round(time.Millisecond), err)
		if err == nil {
			t.Fatal("LOCK of a key held elsewhere granted")
		}
	case <-time.After(wait + 5*time.Second):
		t.Fatalf("LOCK with a %v deadline not answered 5s after it while reconnecting", wait)
	}
}

// zkGoroutines counts the goroutines running this package's backend code.
func zkGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n, found := 0, ""
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "upstream/zookeeper.(*ZooKeeper)") && !strings.Contains(g, "testing.tRunner") {
			n++
			found += g + "\n\n"
		}
	}
	return n, found
}

// TestZKAttackHandoffWatchInterrupted: a grant whose multi makes the next
// waiter's place behind the lock has one goroutine set the watch of the
// lock and wait for it. While that watch is on its way (a slow link), the
// waiter leaves, or the connection is cut (the session lasts, or
// expires), or the instance closes. Then the lock is released through another instance:
// the waiter that stayed is woken or, on its next try, granted; one that
// left leaves no place, and the key is free; one whose place went with
// the session is woken to try again, and granted; Close returns, and no
// goroutine of either instance is left after both close.
func TestZKAttackHandoffWatchInterrupted(t *testing.T) {
	for _, what := range []string{"leave", "cut", "expire", "close"} {
		t.Run(what, func(t *testing.T) {
			srv := zktest.Start(t)
			link := newSlowLink(t, srv.Addr())
			var woken releases
			a := newZK(t, []string{link.cut.Addr()}, Options{SessionTimeout: sessionTimeout, Events: &woken})
			b := newZK(t, []string{srv.Addr()}, Options{})
			raw := rawZK(t, srv.Addr())
			key := "handoff-" + what
			first, w := waitHold("first", 30*time.Second), waitHold("W", 30*time.Second)
			first.Next = w.Waiter
			link.delay.SetDelay(300 * time.Millisecond)
			mustGrant(t, a, key, first) // W's place made; its watch goes out now
			switch what {
			case "leave":
				if err := a.Leave(testCtx(t), key, "W"); err != nil {
					t.Fatal(err)
				}
			case "cut":
				link.cut.Cut()
				eventually(t, 10*time.Second, "the cut seen", func() bool { return !a.Connected() })
				link.cut.Restore()
				link.delay.SetDelay(0)
				eventually(t, 10*time.Second, "connected again", a.Connected)
			case "expire":
				session := a.conn.SessionID()
				link.cut.Cut()
				eventually(t, 20*time.Second, "W's place gone with the session", func() bool { return len(lockNodes(t, raw, key)) == 1 })
				link.cut.Restore()
				link.delay.SetDelay(0)
				eventually(t, 20*time.Second, "a new session", func() bool { return a.Connected() && a.conn.SessionID() != session })
			case "close":
				closed := make(chan struct{})
				go func() { a.Close(); close(closed) }()
				select {
				case <-closed:
				case <-time.After(10 * time.Second):
					t.Fatal("Close not returned in 10s while the handoff's watch was on its way")
				}
			}
			link.delay.SetDelay(0)
			zkRelease(t, b, key, "first", true)
			switch what {
			case "leave", "close":
				eventually(t, 10*time.Second, "W's place gone", func() bool { return len(lockNodes(t, raw, key)) == 0 })
				mustGrant(t, b, key, hold("C", time.Second))
			case "cut", "expire":
				// Woken, by the watch or, if the cut lost it, at once, for its
				// next try to set it again: not left to its timer (the
				// lock's 30s lease).
				eventually(t, 5*time.Second, "W woken", func() bool { return woken.count(key) > 0 })
				mustGrant(t, a, key, w)
			}
			n, _ := zkGoroutines()
			t.Logf("%d backend goroutines before Close", n)
			a.Close()
			b.Close()
			eventually(t, 10*time.Second, "no backend goroutine left", func() bool { n, _ := zkGoroutines(); return n == 0 })
		})
	}
}

// TestZKAttackRetryElsewhereDuringHandoff: T's release through A hands the
// key to waiter W, in line through A, over a slow link; W's client retries
// its LOCK with its token through B, before the handoff lands or after.
// B's answer is busy (the handoff not landed) or W's lock; W's try through
// A (its waiter's) then gets the same lock and fence; one lock node stays,
// C is refused, and W's UNLOCK through B frees the key.
func TestZKAttackRetryElsewhereDuringHandoff(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run(when, func(t *testing.T) {
			srv := zktest.Start(t)
			link := newSlowLink(t, srv.Addr())
			a := newTimedZK(t, link.cut.Addr())
			b := newTimedZK(t, srv.Addr())
			raw := rawZK(t, srv.Addr())
			key := "retry-" + when
			mustGrant(t, a, key, hold("T", 30*time.Second))
			w := waiterFor("W", 30*time.Second)
			mustBusy(t, a, key, w)
			link.delay.SetDelay(400 * time.Millisecond)
			released := releaseToW(t, a, key)
			if when == "after" {
				eventually(t, 10*time.Second, "the handoff on the server", func() bool {
					kids := parseChildren(lockNodes(t, raw, key))
					if len(kids) == 0 {
						return false
					}
					data, _, err := raw.Get(DefaultRoot + "/" + encodeKey(key) + "/" + kids[0].name)
					return err == nil && zkDataOf(string(data)).heldBy("W")
				})
			}
			g, err := b.Acquire(testCtx(t), key, hold("W", 30*time.Second))
			t.Logf("W's retry through B: %+v, %v", g, err)
			if err != nil && !errors.Is(err, engine.ErrNotAcquired) {
				t.Fatalf("W's retry through B: %v; want W's lock or busy", err)
			}
			if err := <-released; err != nil {
				t.Fatal(err)
			}
			link.delay.SetDelay(0)
			viaA := mustGrant(t, a, key, w) // W's waiter tries again through A
			if err == nil && g.Fence != viaA.Fence {
				t.Fatalf("W's lock through B has fence %d, through A %d", g.Fence, viaA.Fence)
			}
			again := mustGrant(t, b, key, hold("W", 30*time.Second))
			if again.Fence != viaA.Fence {
				t.Fatalf("W's lock through B has fence %d, through A %d", again.Fence, viaA.Fence)
			}
			eventually(t, 10*time.Second, "one lock node", func() bool { return len(lockNodes(t, raw, key)) == 1 })
			mustBusy(t, b, key, hold("C", time.Second))
			zkRelease(t, b, key, "W", true)
			mustGrant(t, b, key, hold("C", time.Second))
		})
	}
}
