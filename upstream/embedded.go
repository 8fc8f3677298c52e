package upstream

import (
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// Embedded is the development mode: n in-process miniredis servers on
// loopback ports standing in for independent Redis nodes. Nothing is durable
// and the nodes die with the process; it is not for production.
//
// Keys expire in real time: each server runs with miniredis's ClockTTL, which
// advances its TTLs by the wall-clock time elapsed whenever a command touches
// it (miniredis otherwise only expires keys on FastForward).
type Embedded struct {
	servers []*miniredis.Miniredis
}

// StartEmbedded starts n miniredis servers on 127.0.0.1 with free ports.
func StartEmbedded(n int) (*Embedded, error) {
	if n < 1 {
		return nil, errors.New("upstream: embedded mode needs at least one node")
	}
	e := &Embedded{}
	for range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			e.Close()
			return nil, fmt.Errorf("upstream: start embedded node: %w", err)
		}
		e.servers = append(e.servers, m)
	}
	return e, nil
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
	for _, m := range e.servers {
		m.Close()
	}
}
