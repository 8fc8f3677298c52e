package upstream

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/engine"
	"github.com/lockproxy/lockproxy/quorum"
)

func TestClaimReply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply any
		want  quorum.Claim
	}{
		{"acquired", []any{int64(1), int64(4), int64(4)}, quorum.Claim{State: quorum.Acquired, Counter: 4, Fence: 4}},
		{"mine", []any{int64(2), int64(9), int64(7)}, quorum.Claim{State: quorum.Mine, Counter: 9, Fence: 7}},
		{"taken", []any{int64(0), int64(9), int64(1500)}, quorum.Claim{State: quorum.Taken, Counter: 9, Held: 1500 * time.Millisecond}},
		{"taken without expiry", []any{int64(0), int64(9), int64(-1)}, quorum.Claim{State: quorum.Taken, Counter: 9}},
	} {
		got, err := claim(tc.reply)
		if err != nil || got != tc.want {
			t.Errorf("%s: claim(%v) = %+v, %v; want %+v", tc.name, tc.reply, got, err, tc.want)
		}
	}
	for _, bad := range []any{
		nil, int64(1), []any{}, []any{int64(0), int64(1)},
		[]any{int64(3), int64(1), int64(1)}, []any{int64(0), int64(1), "1500"},
	} {
		if _, err := claim(bad); !errors.Is(err, ErrBadReply) {
			t.Errorf("claim(%#v) = %v, want ErrBadReply", bad, err)
		}
	}
}

func TestEntryReply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply any
		want  quorum.Entry
		held  bool
	}{
		{"free", []any{}, quorum.Entry{}, false},
		{"lockproxy's", []any{"t", int64(4), "bound", "w", int64(1500)}, quorum.Entry{Token: "t", Fence: 4, Mode: engine.Bound, Name: "w", TTL: 1500 * time.Millisecond}, true},
		{"a string of somebody else's", []any{"v", int64(0), "", "", int64(900)}, quorum.Entry{Token: "v", Mode: engine.Lease, TTL: 900 * time.Millisecond}, true},
		{"a hash", []any{"", int64(0), "", "", int64(900), "hash"}, quorum.Entry{Mode: engine.Lease, TTL: 900 * time.Millisecond, Type: "hash"}, true},
		{"no expiry", []any{"v", int64(0), "", "", int64(-1)}, quorum.Entry{Token: "v", Mode: engine.Bound, TTL: forever}, true},
	} {
		got, held, err := entry(tc.reply)
		if err != nil || got != tc.want || held != tc.held {
			t.Errorf("%s: entry(%v) = %+v, %v, %v; want %+v, %v", tc.name, tc.reply, got, held, err, tc.want, tc.held)
		}
	}
	for _, bad := range []any{
		nil, []any{"t"}, []any{"t", int64(1), "lease", "w", "1500"},
		[]any{"", int64(0), "", "", int64(9), ""}, []any{"", int64(0), "", "", int64(9), int64(1)},
	} {
		if _, _, err := entry(bad); !errors.Is(err, ErrBadReply) {
			t.Errorf("entry(%#v) = %v, want ErrBadReply", bad, err)
		}
	}
}
