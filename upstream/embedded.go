package upstream

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Embedded is the development mode: n in-process miniredis servers on
// loopback ports standing in for independent Redis nodes. Nothing is durable
// and the nodes die with the process; it is not for production.
//
// Keys expire in real time: every embeddedTick, each server's TTLs are
// advanced by the wall-clock time elapsed (miniredis otherwise only
// expires keys on FastForward). Not miniredis's ClockTTL, which does the
// same on every command: each advance walks every key of the server in
// sorted order, so a command cost time in proportion to the keys held, and
// a few thousand held locks slowed every lock to milliseconds. A key lives
// up to one tick longer than its TTL, and PTTL reads up to a tick high:
// a node that holds a lock longer than its lease is what a slow node looks
// like, and the validity a client is told is counted from its own clock.
type Embedded struct {
	servers []*miniredis.Miniredis
	stop    chan struct{}
	ticks   sync.WaitGroup
}

// embeddedTick is how often the embedded servers' TTLs advance.
const embeddedTick = 5 * time.Millisecond

// StartEmbedded starts n miniredis servers on 127.0.0.1 with free ports.
func StartEmbedded(n int) (*Embedded, error) {
	if n < 1 {
		return nil, errors.New("upstream: embedded mode needs at least one node")
	}
	e := &Embedded{stop: make(chan struct{})}
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			e.Close()
			return nil, fmt.Errorf("upstream: start embedded node: %w", err)
		}
		e.servers = append(e.servers, m)
	}
	e.ticks.Go(e.tick)
	return e, nil
}

// tick advances every server's TTLs by the time elapsed, every
// embeddedTick, until Close.
func (e *Embedded) tick() {
	t := time.NewTicker(embeddedTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			// time.Since uses the monotonic clock: a wall-clock step
			// neither expires every key nor stops expiry.
			elapsed := time.Since(last)
			last = last.Add(elapsed)
			for _, m := range e.servers {
				m.FastForward(elapsed)
			}
		}
	}
}

// Addrs are the servers' addresses, "127.0.0.1:PORT", one per node.
func (e *Embedded) Addrs() []string {
	addrs := make([]string, len(e.servers))
	for i, m := range e.servers {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Close stops every server.
func (e *Embedded) Close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.ticks.Wait()
	for _, m := range e.servers {
		m.Close()
	}
}
