package quorum_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/upstream"
)

// BenchmarkAcquireRelease takes and releases a fresh key per iteration,
// from parallel goroutines, over three real redis-servers: the fan-outs,
// the node pipelines and the round trips of one LOCK+UNLOCK cycle.
//
//	go test -run '^$' -bench AcquireRelease -cpu 2 ./quorum/
func BenchmarkAcquireRelease(b *testing.B) {
	nodes := make([]quorum.Node, 3)
	for i := range nodes {
		s := redistest.Start(b, redistest.Options{})
		n := upstream.NewRedisNode(upstream.RedisOptions{Addr: s.Addr()})
		b.Cleanup(func() { n.Close() })
		nodes[i] = n
	}
	r := quorum.New(nodes, quorum.Config{})
	b.Cleanup(func() { r.Close() })
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(16) // 32 clients at -cpu 2, as the bench's c=32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "bench:" + strconv.FormatInt(next.Add(1), 10)
			h := engine.Hold{Token: engine.NewToken(), TTL: 10 * time.Second, Mode: engine.Lease}
			if _, err := r.Acquire(ctx, key, h); err != nil {
				b.Error(err)
				return
			}
			if _, err := r.Release(ctx, key, h.Token, nil, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
