package docstest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// tokenOrInt finds the parts of a line that may differ between the page
// and a run: 32-hex-digit tokens and integers.
var tokenOrInt = regexp.MustCompile(`\b[0-9a-f]{32}\b|-?[0-9]+`)

var token = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Matcher compares a transcript's lines with a run's output. The tokens it
// has bound (a token on the page to the one the run printed in its place)
// hold for the whole transcript.
type Matcher struct {
	bound map[string]string
	// SlackMS widens the tolerance below an integer of 1000 or more: a
	// validity read later than the page's was, on a loaded machine, is
	// smaller by up to the time the run took (the runner sets it).
	SlackMS int64
}

// NewMatcher returns a Matcher with no token bound.
func NewMatcher() *Matcher { return &Matcher{bound: map[string]string{}} }

// Substitute replaces every bound token in s with the run's.
func (m *Matcher) Substitute(s string) string {
	return tokenOrInt.ReplaceAllStringFunc(s, func(t string) string {
		if v, ok := m.bound[t]; ok {
			return v
		}
		return t
	})
}

// Lines compares want with got line by line and says where they differ.
func (m *Matcher) Lines(want, got []string) error {
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(want):
			return fmt.Errorf("output line %d %q is not on the page", i+1, got[i])
		case i >= len(got):
			return fmt.Errorf("output ends before line %d %q", i+1, want[i])
		case !m.Line(want[i], got[i]):
			return fmt.Errorf("output line %d is %q, the page says %q", i+1, got[i], want[i])
		}
	}
	return nil
}

// Line reports whether got matches want: the same text, a 32-hex-digit
// token where want has one (the same one wherever want's token is bound),
// and equal integers, or integers of 1000 or more within 5% of each other
// (and SlackMS more below).
// Trailing blanks are ignored.
func (m *Matcher) Line(want, got string) bool {
	want, got = strings.TrimRight(want, " \t"), strings.TrimRight(got, " \t")
	wp, gp := split(want), split(got)
	if len(wp) != len(gp) {
		return false
	}
	binds := map[string]string{}
	for i, w := range wp {
		g := gp[i]
		switch {
		case token.MatchString(w):
			b, ok := m.bound[w]
			if !token.MatchString(g) || (ok && b != g) || (!ok && binds[w] != "" && binds[w] != g) {
				return false
			}
			binds[w] = g
		case !m.sameInt(w, g) && w != g:
			return false
		}
	}
	for w, g := range binds {
		m.bound[w] = g
	}
	return true
}

// split cuts s into literal text, tokens and integers, in order.
func split(s string) []string {
	var parts []string
	at := 0
	for _, ix := range tokenOrInt.FindAllStringIndex(s, -1) {
		if ix[0] > at {
			parts = append(parts, s[at:ix[0]])
		}
		parts = append(parts, s[ix[0]:ix[1]])
		at = ix[1]
	}
	if at < len(s) {
		parts = append(parts, s[at:])
	}
	return parts
}

func (m *Matcher) sameInt(w, g string) bool {
	a, err1 := strconv.ParseInt(w, 10, 64)
	b, err2 := strconv.ParseInt(g, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	if a == b {
		return true
	}
	if a < 1000 || b < 1000 {
		return false
	}
	return 20*abs(a-b) <= a || (b < a && 20*(a-b-m.SlackMS) <= a)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
