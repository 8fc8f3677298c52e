package quorum_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/luascript"
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

// reentrantLockScript is a Redisson-style reentrant lock acquire: a
// script that writes, so it takes the turn.
const reentrantLockScript = `if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`

// BenchmarkEvalWrite runs a reentrant-lock script that writes, on a
// fresh key per iteration from parallel goroutines, over three real
// redis-servers: the turn, the guarded script and the give-back. The
// read variant (BenchmarkEvalRead, the same script admitted as one that
// writes nothing would be: no turn) is the baseline of the same run.
//
//	go test -run '^$' -bench 'Eval(Write|Read)' -cpu 2 ./quorum/
func BenchmarkEvalWrite(b *testing.B) { benchEval(b, true, 16) }

// BenchmarkEvalRead: see BenchmarkEvalWrite.
func BenchmarkEvalRead(b *testing.B) { benchEval(b, false, 16) }

// BenchmarkEvalWriteOneClient and BenchmarkEvalReadOneClient: one client
// at a time, so that ns/op is the latency of one script (round trips).
func BenchmarkEvalWriteOneClient(b *testing.B) { benchEval(b, true, 0) }

// BenchmarkEvalReadOneClient: see BenchmarkEvalWriteOneClient.
func BenchmarkEvalReadOneClient(b *testing.B) { benchEval(b, false, 0) }

func benchEval(b *testing.B, writes bool, parallelism int) {
	nodes := make([]quorum.Node, 3)
	var rn []*upstream.RedisNode
	for i := range nodes {
		s := redistest.Start(b, redistest.Options{})
		n := upstream.NewRedisNode(upstream.RedisOptions{Addr: s.Addr()})
		b.Cleanup(func() { n.Close() })
		nodes[i], rn = n, append(rn, n)
	}
	r := quorum.New(nodes, quorum.Config{})
	b.Cleanup(func() { r.Close() })
	s, err := luascript.Admit([]byte(reentrantLockScript))
	if err != nil {
		b.Fatal(err)
	}
	s.Writes = writes // the read variant skips the turn: the baseline
	ctx := context.Background()
	var next atomic.Int64
	before := rn[0].Stats()
	run := func() bool {
		key := "bench:" + strconv.FormatInt(next.Add(1), 10)
		if _, err := r.Eval(ctx, s, []string{key}, []string{"30000", "owner"}, 5*time.Second); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallelism == 0 {
		for range b.N {
			if !run() {
				return
			}
		}
	} else {
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && run() {
			}
		})
	}
	b.StopTimer()
	after := rn[0].Stats()
	b.ReportMetric(float64(after.Calls-before.Calls)/float64(b.N), "node-calls/op")
	b.ReportMetric(float64(after.RoundTrips-before.RoundTrips)/float64(b.N), "node-round-trips/op")
}
