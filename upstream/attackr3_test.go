package upstream

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// Attacks on the vetted floor's record (floor.lua, the status read).

// TestStatusReadsTheRecordOfAnEarlierProcess: the status read gives, beside
// the floor recorded for the process that answers (Status.Floor), the
// counter of the record whichever process it names (Status.Recorded): a
// node verified durable that restarted kept the holds of the process
// before it, those from before its floor too, and is counted at once with
// that record's bound (quorum's TestStaleHoldKeptByADurableRestart). A
// record that cannot be read gives neither. When the read gave the
// record only for the process it names, an instance that first met the
// durable process took none of those holds as stale.
func TestStatusReadsTheRecordOfAnEarlierProcess(t *testing.T) {
	addr := redistest.Start(t, redistest.Options{}).Addr()
	n, ctx, raw := newNode(t, RedisOptions{Addr: addr}), testCtx(t), rawClient(t, addr)
	status := func() quorum.Status {
		t.Helper()
		r := n.do(ctx, &quorum.Op{Kind: quorum.OpStatus})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.Status
	}
	if s := status(); s.Floor != 0 || s.Recorded != 0 {
		t.Fatalf("status before any floor: %+v, want none", s)
	}
	mustAcquire(t, n, "k", hold("a", time.Minute))
	// The process before this one, as a durable restart leaves it.
	earlier := strings.Repeat("e", 40)
	if r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 40, Token: earlier}); r.Err != nil || !r.OK || r.Claim.Counter != 40 {
		t.Fatalf("OpFloor: %+v", r)
	}
	if s := status(); s.Floor != 0 || s.Recorded != 40 {
		t.Fatalf("status with an earlier process's record: %+v, want floor 0, recorded 40", s)
	}
	run := status().RunID
	if r := n.do(ctx, &quorum.Op{Kind: quorum.OpFloor, Fence: 50, Token: run}); r.Err != nil || !r.OK || r.Claim.Counter != 50 {
		t.Fatalf("OpFloor: %+v", r)
	}
	if s := status(); s.Floor != 50 || s.Recorded != 50 {
		t.Fatalf("status with this process's record: %+v, want floor and recorded 50", s)
	}
	for _, v := range []string{"ninety:" + run, "90:", "-3:" + run} {
		raw.Set(ctx, DefaultPrefix+"vetted-floor", v, 0)
		if s := status(); s.Floor != 0 || s.Recorded != 0 {
			t.Fatalf("status with record %q: %+v, want none", v, s)
		}
	}
	raw.Del(ctx, DefaultPrefix+"vetted-floor")
	raw.HSet(ctx, DefaultPrefix+"vetted-floor", "90", run)
	if s := status(); s.Floor != 0 || s.Recorded != 0 {
		t.Fatalf("status with a record of another type: %+v, want none", s)
	}
}
