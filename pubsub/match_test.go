package pubsub

import "testing"

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", false}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "bac", false},
		{"h?llo", "hello", true}, {"h?llo", "hllo", false}, {"h*llo", "heeeello", true},
		{"h[ae]llo", "hallo", true}, {"h[ae]llo", "hillo", false}, {"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false}, {"h[a-b]llo", "hbllo", true}, {"h[a-b]llo", "hcllo", false},
		{`h\*llo`, "h*llo", true}, {`h\*llo`, "hello", false}, {"redisson_lock__channel:{*}", "redisson_lock__channel:{k}", true},
		{"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false}, {"", "", true}, {"", "a", false},
		{"[a-]", "]", true}, {"[a-]", "b", false}, {"[]", "]", false}, {"[^]", "b", true}, {`\`, `\`, true},
		{`b\`, `b\`, true}, {"[b", "b", true}, {"*[", "a[", false}, {"lock:[ab]*", "lock:a1", true}, {"lock:[ab]*", "lock:c1", false},
	} {
		if got := Match(c.p, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
}

// FuzzMatch: any pattern and channel, no panic; a pattern with no special
// byte matches only itself.
func FuzzMatch(f *testing.F) {
	f.Add("h[^a-z\\]*?", "hello")
	f.Add("[", "x")
	f.Fuzz(func(t *testing.T, p, s string) {
		_ = Match(p, s)
		for i := 0; i < len(p); i++ {
			switch p[i] {
			case '*', '?', '[', '\\':
				return
			}
		}
		if Match(p, s) != (p == s) {
			t.Fatalf("Match(%q, %q) on a literal pattern", p, s)
		}
	})
}
