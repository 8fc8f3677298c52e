package resp_test

import (
	"testing"

	"github.com/lockproxy/lockproxy/resp"
)

// TestChannelPatterns: which channels and patterns a user limited to
// billing:* and app:? may subscribe and publish to, and that the default
// user may use every one.
func TestChannelPatterns(t *testing.T) {
	s := newOpsServer(t, resp.Config{Password: "pw"})
	s.srv.SetUsers([]resp.User{{Name: "billing", Password: "b", Keys: []string{"billing:*", "app:?"}, Native: true}})
	const noperm = "-NOPERM No permissions to access a channel"
	for _, tc := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"PUBLISH", "billing:1", "m"}, ":0"},
		{[]string{"PUBLISH", "orders:1", "m"}, noperm},
		{[]string{"PUBLISH", "app:x", "m"}, ":0"},
		{[]string{"PUBLISH", "app:xy", "m"}, noperm},
		{[]string{"SPUBLISH", "orders:1", "m"}, noperm},
		{[]string{"PSUBSCRIBE", "*"}, noperm},
		{[]string{"PSUBSCRIBE", "billing:x*"}, noperm},   // within billing:*, but not one of its patterns (Redis's rule)
		{[]string{"PSUBSCRIBE", "billing:[a]*"}, noperm}, // a class key patterns do not have
		{[]string{"PSUBSCRIBE", "app:?"}, "*3[$psubscribe $app:? :1]"},
		{[]string{"PSUBSCRIBE", "billing:7"}, "*3[$psubscribe $billing:7 :1]"}, // a channel name is its own pattern
		{[]string{"SUBSCRIBE", "orders:1"}, noperm},
	} {
		c := s.dial(t)
		if r := c.do(t, "AUTH", "billing", "b"); r != "+OK" {
			t.Fatalf("AUTH: %q", r)
		}
		if got := c.do(t, tc.cmd...); got != tc.want {
			t.Errorf("billing: %v = %q, want %q", tc.cmd, got, tc.want)
		}
		root := s.dial(t)
		root.do(t, "AUTH", "pw")
		if got := root.do(t, tc.cmd...); got[0] == '-' {
			t.Errorf("default user: %v = %q", tc.cmd, got)
		}
	}
}
