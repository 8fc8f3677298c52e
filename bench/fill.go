package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a fill sends its SET NX PX: pipelined batches over a few connections,
// as the RSS case sends its LOCKs.
const (
	fillConns = 16
	fillBatch = 500
)

// fillResult is what locking many distinct keys once each did.
type fillResult struct {
	locked  int64 // granted: OK
	refused int64 // not granted: a null reply
	errors  int64 // failed commands, or commands of a failed pipeline
	errs    errorLog
	took    time.Duration // from the first command sent to the last reply
}

// fill locks the keys prefix0 to prefix(n-1) once each with SET key token
// NX PX ttl through the server at addr, fillBatch per round trip on each of
// fillConns connections, until every key was tried, bound passed or ctx
// ended. Nothing releases them: each lease ends by itself after ttl.
func fill(ctx context.Context, addr, prefix string, n int, ttl, bound time.Duration) fillResult {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: fillConns, MaxRetries: -1,
		ReadTimeout: bound, ContextTimeoutEnabled: true})
	defer c.Close()
	start := time.Now()
	var next atomic.Int64
	results := make([]fillResult, fillConns)
	var wg sync.WaitGroup
	for g := range fillConns {
		wg.Go(func() {
			for from := next.Add(fillBatch) - fillBatch; from < int64(n) && ctx.Err() == nil; from = next.Add(fillBatch) - fillBatch {
				fillBatchOnce(ctx, c, prefix, from, min(from+fillBatch, int64(n)), ttl, &results[g])
			}
		})
	}
	wg.Wait()
	out := fillResult{took: time.Since(start)}
	for _, r := range results {
		out.locked += r.locked
		out.refused += r.refused
		out.errors += r.errors
		out.errs.merge(r.errs)
	}
	return out
}

// fillBatchOnce sends SET NX PX for the keys from to to-1 in one pipeline
// and counts the replies into r.
func fillBatchOnce(ctx context.Context, c *redis.Client, prefix string, from, to int64, ttl time.Duration, r *fillResult) {
	p := c.Pipeline()
	cmds := make([]*redis.Cmd, 0, to-from)
	for i := from; i < to; i++ {
		n := strconv.FormatInt(i, 10)
		cmds = append(cmds, p.Do(ctx, "SET", prefix+n, "t"+n, "NX", "PX", ttl.Milliseconds()))
	}
	_, _ = p.Exec(ctx) // every command's own error is read below
	for _, cmd := range cmds {
		switch err := cmd.Err(); {
		case err == nil && cmd.Val() == "OK":
			r.locked++
		case errors.Is(err, redis.Nil):
			r.refused++
		case err != nil:
			r.errors++
			r.errs.add(err)
		default:
			r.errors++
			r.errs.add(fmt.Errorf("SET NX PX replied %v", cmd.Val()))
		}
	}
}

// String sums the fill up for a table.
func (r fillResult) String() string {
	s := fmt.Sprintf("%d locked, %d refused, %d errors in %v", r.locked, r.refused, r.errors, r.took.Round(time.Millisecond))
	if lines := r.errs.lines(); len(lines) > 0 {
		s += " (" + lines[0] + ")"
	}
	return s
}
