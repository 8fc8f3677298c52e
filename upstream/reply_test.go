package upstream

import (
	"errors"
	"testing"
	"time"

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
