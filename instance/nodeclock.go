package instance

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/lockproxy/lockproxy/upstream"
)

// clockJumped is quorum.Config.OnClockJump: node i's wall clock jumped by
// jump, and it is held out for holdFor. Logged as an error and counted
// (lockproxy_node_clock_jumps_total; deploy/alerts.yml fires on it).
func (s *nodeSet) clockJumped(i int, jump, holdFor time.Duration) {
	n := s.nodes[i]
	s.jumps.WithLabelValues(n.String()).Inc()
	s.log.Error("redis node's wall clock jumped: its answers in that round trip did not count, it is held out, and holders of locks it vouched for are told when fewer than a majority still hold them",
		zap.String("node", n.String()), zap.Duration("jump", jump), zap.Duration("held_out_for", holdFor))
}

// clockOf is what node n's replies said of its clock, when it is a Redis
// node.
func clockOf(n *watchedNode) (upstream.ClockStats, bool) {
	c, ok := n.Node.(interface{ Clock() upstream.ClockStats })
	if !ok {
		return upstream.ClockStats{}, false
	}
	return c.Clock(), true
}

// clockJumps is the clock jumps seen over every node.
func (s *nodeSet) clockJumps() uint64 {
	var total uint64
	for _, n := range s.nodes {
		if c, ok := clockOf(n); ok {
			total += c.Jumps
		}
	}
	return total
}

// clockOffsetDesc is lockproxy_node_clock_offset_seconds.
var clockOffsetDesc = prometheus.NewDesc("lockproxy_node_clock_offset_seconds",
	"The Redis node's wall clock minus this instance's, at its last reply (within half a round trip); absent until the node answered.",
	[]string{"node"}, nil)

// clockOffsets collects lockproxy_node_clock_offset_seconds at each scrape.
type clockOffsets struct{ s *nodeSet }

func (c clockOffsets) Describe(ch chan<- *prometheus.Desc) { ch <- clockOffsetDesc }

func (c clockOffsets) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.s.nodes {
		if st, ok := clockOf(n); ok && st.Known {
			ch <- prometheus.MustNewConstMetric(clockOffsetDesc, prometheus.GaugeValue, st.Offset.Seconds(), n.String())
		}
	}
}
