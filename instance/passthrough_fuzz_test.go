package instance_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// pipelineOps are the steps a fuzzed pipeline is made of; p is a prefix
// unique to the pipeline, i the step's place (lock values differ per step,
// so that no SET NX is a retry of an earlier one). An op that returns
// closes=true ends the pipeline (Redis closes the connection after it).
var pipelineOps = []func(p string, i int) (args []string, raw string, closes bool){
	func(p string, i int) ([]string, string, bool) { return []string{"SET", p + "a", "v"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"GET", p + "a"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"INCR", p + "n"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"DEL", p + "a"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"RPUSH", p + "l", "x"}, "", false },
	func(p string, i int) ([]string, string, bool) {
		return []string{"LRANGE", p + "l", "0", "-1"}, "", false
	},
	func(p string, i int) ([]string, string, bool) { return []string{"MGET", p + "a", p + "n"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"INCR", p + "a"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"ECHO", "hi"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"PING"}, "", false },
	func(p string, i int) ([]string, string, bool) { return nil, "\r\n", false },
	func(p string, i int) ([]string, string, bool) { return []string{"CLIENT", "REPLY", "OFF"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"CLIENT", "REPLY", "ON"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"CLIENT", "REPLY", "SKIP"}, "", false },
	func(p string, i int) ([]string, string, bool) {
		return []string{"SET", "lock:" + p + "x", "t" + strconv.Itoa(i), "NX", "PX", "10000"}, "", false
	},
	func(p string, i int) ([]string, string, bool) { return []string{"GET", "lock:" + p + "x"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"DEL", "lock:" + p + "x"}, "", false },
	func(p string, i int) ([]string, string, bool) {
		return []string{"EXISTS", "lock:" + p + "x"}, "", false
	},
	func(p string, i int) ([]string, string, bool) {
		return []string{"SETNX", "lock:" + p + "y", "t" + strconv.Itoa(i)}, "", false
	},
	func(p string, i int) ([]string, string, bool) { return []string{"DEL", "lock:" + p + "y"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"NOSUCH", "a"}, "", false },
	func(p string, i int) ([]string, string, bool) { return []string{"GET"}, "", false },
	func(p string, i int) ([]string, string, bool) { return nil, "SET \"x\r\n", true },
	func(p string, i int) ([]string, string, bool) { return nil, "*x\r\n", true },
}

// pipelineOf is the wire text of the pipeline that ops describes (a byte a
// step: its low bits choose the op, its high bit the inline form), and
// whether it ends the connection. Without that, CLIENT REPLY ON and
// ECHO end follow, so that the last reply is known.
func pipelineOf(p string, ops []byte) (string, bool) {
	var b strings.Builder
	quiet := false
	for i, o := range ops {
		args, raw, closes := pipelineOps[int(o&0x7f)%len(pipelineOps)](p, i)
		if closes && quiet {
			// Redis, replying nothing, keeps the connection until it
			// writes again; nothing to compare.
			args, raw, closes = nil, "\r\n", false
		}
		quiet = quiet || len(args) == 3 && args[0] == "CLIENT" && args[2] != "ON"
		switch {
		case raw != "":
			b.WriteString(raw)
		case o&0x80 != 0:
			b.WriteString(strings.Join(args, " ") + "\r\n")
		default:
			b.WriteString(encodeCommand(args))
		}
		if closes {
			return b.String(), true
		}
	}
	b.WriteString(encodeCommand([]string{"CLIENT", "REPLY", "ON"}) + encodeCommand([]string{"ECHO", "end"}))
	return b.String(), false
}

// replyStream sends pipeline to addr in one write and reads the replies up
// to ECHO end's, or, when the pipeline closes the connection, to the close.
func replyStream(t *testing.T, addr, pipeline string, closes bool) []string {
	r := dialRaw(t, addr)
	r.send(pipeline)
	var got []string
	for {
		r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		s, err := readReply(r.rd)
		if err != nil {
			if !closes || strings.Contains(err.Error(), "timeout") {
				t.Fatalf("after %q: %v", got, err)
			}
			return got
		}
		got = append(got, s)
		if !closes && s == "end" {
			return got
		}
	}
}

// fuzzSeeds are pipelines worth checking on every run: issue 27's batch
// endings, CLIENT REPLY around queued data replies and lock replies, lock
// and data commands interleaved.
var fuzzSeeds = [][]byte{
	{0x80, 0x81, 10},                   // SET, GET (inline), a blank line
	{2, 22},                            // INCR, unbalanced quotes
	{2, 1, 23},                         // INCR, GET, a bad multibulk length
	{11, 2, 10, 22},                    // REPLY OFF, INCR, a blank line, unbalanced quotes
	{11, 0, 14, 1, 12, 1},              // REPLY OFF, SET, lock SET, GET, REPLY ON, GET
	{13, 2, 2, 13, 15, 2},              // REPLY SKIP, INCR, INCR, REPLY SKIP, lock GET, INCR
	{14, 0, 15, 1, 16, 17, 3},          // lock SET, SET, lock GET, GET, lock DEL, lock EXISTS, DEL
	{18, 2, 18, 19, 2, 10, 10},         // SETNX, INCR, SETNX, DEL, INCR, blank lines
	{20, 21, 7, 9, 8, 10},              // unknown command, wrong arity, INCR of a string, PING, ECHO, blank
	{4, 4, 5, 6, 14, 5, 16, 5},         // list and lock steps interleaved
	{13, 10, 2, 10, 1, 12, 10},         // REPLY SKIP, blank, INCR, blank, GET, REPLY ON, blank
	{0x8e, 0x82, 0x8f, 0x90, 0x8a, 17}, // inline lock SET, INCR, lock GET, lock DEL, blank, lock EXISTS
	{13, 10, 2, 0x8d, 10, 1, 10},       // REPLY SKIP, blank, INCR, REPLY SKIP (inline), blank, GET, blank
}

// FuzzPassthroughPipeline sends random pipelines of lock and data
// commands, blank lines, malformed tails and CLIENT REPLY to lockproxy
// (lock_keys lock:*) and to a plain redis-server, and requires the same
// reply streams. Issue 27.
func FuzzPassthroughPipeline(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	plain := redistest.Start(f, redistest.Options{})
	proxy := fuzzPassthrough(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 || len(ops) > 64 {
			return
		}
		p := fmt.Sprintf("fz%d:%d:", time.Now().UnixNano(), n.Add(1))
		pipeline, closes := pipelineOf(p, ops)
		want := replyStream(t, plain.Addr(), pipeline, closes)
		if got := replyStream(t, proxy, pipeline, closes); !slices.Equal(got, want) {
			t.Fatalf("pipeline %q:\nredis-server: %q\nlockproxy:    %q", pipeline, want, got)
		}
	})
}

// fuzzPassthrough starts a data Redis, three lock nodes and lockproxy with
// lock_keys lock:*, and returns lockproxy's address.
func fuzzPassthrough(f *testing.F) string {
	cfg := testConfig(redistest.StartN(f, 3, redistest.Options{}))
	cfg.Passthrough.Address = redistest.Start(f, redistest.Options{}).Addr()
	cfg.Passthrough.LockKeys = []string{"lock:*"}
	in, err := instance.Start(cfg, zaptest.NewLogger(f, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Shutdown(ctx)
	})
	return in.Addr()
}
