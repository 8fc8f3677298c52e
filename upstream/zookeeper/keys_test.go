package zookeeper

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/lockproxy/lockproxy/engine"
)

// validSegment reports why seg is not a path segment ZooKeeper accepts
// and lockproxy can use, or "".
func validSegment(seg string) string {
	if seg == "" || seg == "." || seg == ".." {
		return "empty, . or .."
	}
	for i := 0; i < len(seg); i++ {
		if c := seg[i]; !keptByte(c) && c != '%' {
			return "has byte " + string(rune(c))
		}
	}
	return ""
}

func TestZKKeyEncoding(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"a", "a"},
		{"lock_A-9", "lock_A-9"},
		{"/", "%2F"},
		{".", "%2E"},
		{"..", "%2E%2E"},
		{"%", "%25"},
		{"%25", "%2525"},
		{"lock:user/42", "lock%3Auser%2F42"},
		{"a b", "a%20b"},
		{"\x00\x01\x7f\xff", "%00%01%7F%FF"},
		{"é", "%C3%A9"},
		{"\uf000\ufff0", "%EF%80%80%EF%BF%B0"}, // ranges ZooKeeper refuses in a path
		{"zookeeper", "zookeeper"},
	} {
		got := encodeKey(tc.key)
		if got != tc.want {
			t.Errorf("encodeKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
		if why := validSegment(got); why != "" {
			t.Errorf("encodeKey(%q) = %q: %s", tc.key, got, why)
		}
		if back, err := decodeKey(got); back != tc.key || err != nil {
			t.Errorf("decodeKey(%q) = %q, %v; want %q", got, back, err, tc.key)
		}
	}
	long := strings.Repeat("/", 1024)
	if got := encodeKey(long); len(got) != 3*1024 || validSegment(got) != "" {
		t.Errorf("a 1024-byte key of '/' encodes to %d bytes", len(got))
	}
}

func TestZKKeyDecodeRefusesForeignSegments(t *testing.T) {
	for _, seg := range []string{"", "%", "%2", "a%", "%2f", "%41", "%5F", "a.b", "a/b", "..", "é", "%G0"} {
		if key, err := decodeKey(seg); err == nil {
			t.Errorf("decodeKey(%q) = %q, want an error", seg, key)
		}
	}
}

// FuzzZKKey: every non-empty key encodes to a valid segment that decodes
// back to it, and every segment that decodes is the encoding of its key
// (one encoding per key).
func FuzzZKKey(f *testing.F) {
	for _, s := range []string{"a", "/", ".", "..", "%", "%2F", "\x00\xff", "é", "lock:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s != "" {
			enc := encodeKey(s)
			if why := validSegment(enc); why != "" {
				t.Fatalf("encodeKey(%q) = %q: %s", s, enc, why)
			}
			if back, err := decodeKey(enc); back != s || err != nil {
				t.Fatalf("decodeKey(encodeKey(%q)) = %q, %v", s, back, err)
			}
		}
		if key, err := decodeKey(s); err == nil && encodeKey(key) != s {
			t.Fatalf("decodeKey(%q) = %q, which encodes to %q", s, key, encodeKey(key))
		}
	})
}

func TestZKChildrenSortBySequence(t *testing.T) {
	kids := parseChildren([]string{"b-t1-0000000010", "junk", "a-w2-0000000002", "c-t3-0000000100", "short"})
	var names []string
	for _, c := range kids {
		names = append(names, c.name)
	}
	if got := strings.Join(names, ","); got != "a-w2-0000000002,b-t1-0000000010,c-t3-0000000100" {
		t.Fatalf("sorted: %s", got)
	}
	if p := nodePrefix("tok", kindPlace); !strings.HasPrefix(p, placePrefix("tok")) || len(p) != 16+1+9+1 {
		t.Fatalf("place prefix %q", p)
	}
}

// TestZKErrorsUnavailable: connection errors match engine.ErrUnavailable
// (a waiter tries again); the others do not.
func TestZKErrorsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{zk.ErrConnectionClosed, true},
		{zk.ErrNoServer, true},
		{zk.ErrSessionExpired, true},
		{zk.ErrNoNode, false},
		{zk.ErrBadVersion, false},
	} {
		err := zkErr("get", "/lockproxy/k", tc.err)
		if errors.Is(err, engine.ErrUnavailable) != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%v: %v; unavailable %v", tc.err, err, errors.Is(err, engine.ErrUnavailable))
		}
	}
	if !errors.Is(ErrNotConnected, engine.ErrUnavailable) || errors.Is(ErrBadNode, engine.ErrUnavailable) {
		t.Error("ErrNotConnected must be, ErrBadNode must not be, an ErrUnavailable")
	}
	if err := zkErr("get", "/k", context.Canceled); err != context.Canceled {
		t.Errorf("a context error is wrapped: %v", err)
	}
}
