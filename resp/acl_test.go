package resp

import (
	"regexp"
	"strings"
	"testing"
)

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"app:*", "app:x", true}, {"app:*", "app:", true}, {"app:*", "ap", false},
		{"*", "", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"*:lock", "x/y:lock", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false},
		{"*a*a*a*a*a*a*a*b", strings.Repeat("a", 4096), false}, // linear, not exponential
	} {
		if got := glob(c.pattern, c.s); got != c.want {
			t.Errorf("glob(%q, %q) = %v", c.pattern, c.s, got)
		}
	}
}

// FuzzGlob checks glob, which reads client keys, against a regexp
// built from the same pattern.
func FuzzGlob(f *testing.F) {
	f.Add("app:*", "app:x")
	f.Add("a?c*", "abcd")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		var re strings.Builder
		re.WriteString(`(?s)^`)
		for _, r := range []byte(pattern) {
			switch r {
			case '*':
				re.WriteString(`[\x00-\xff]*`)
			case '?':
				re.WriteString(`[\x00-\xff]`)
			default:
				re.WriteString(`\x` + hex2(r))
			}
		}
		re.WriteString(`$`)
		want := regexp.MustCompile(re.String()).MatchString(latin1(s))
		if got := glob(pattern, s); got != want {
			t.Fatalf("glob(%q, %q) = %v, regexp says %v", pattern, s, got, want)
		}
	})
}

func hex2(b byte) string { return string("0123456789abcdef"[b>>4]) + string("0123456789abcdef"[b&15]) }

// latin1 maps each byte to one rune, so the regexp matches bytes.
func latin1(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}
