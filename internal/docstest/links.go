package docstest

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// ErrBrokenLink is wrapped by every error CheckLinks reports.
var ErrBrokenLink = errors.New("broken link")

var (
	heading    = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	htmlID     = regexp.MustCompile(`<a\s[^>]*(?:id|name)="([^"]+)"`)
	inlineLink = regexp.MustCompile(`\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Slug is GitHub's anchor for a heading's text: Markdown links and
// emphasis reduced to their text, lower case, punctuation dropped, each
// space a hyphen.
func Slug(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of p: its headings' slugs (a repeated one
// numbered -1, -2, ... as GitHub does) and HTML id/name attributes.
func Anchors(p Page) map[string]bool {
	text := prose(p)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		s := Slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range htmlID.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

// Link is one inline Markdown link of a page.
type Link struct {
	Page   string
	Line   int
	Target string
}

// Links returns p's inline links outside code blocks and code spans.
func Links(p Page) []Link {
	paras := strings.Split(prose(p), "\n\n") // a code span ends with its paragraph
	for i, para := range paras {
		paras[i] = codeSpan.ReplaceAllStringFunc(para, func(s string) string {
			// keep the line count; a code span's text is no link
			return strings.Repeat("\n", strings.Count(s, "\n"))
		})
	}
	text := strings.Join(paras, "\n\n")
	var out []Link
	for _, ix := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
		line := 1 + strings.Count(text[:ix[0]], "\n")
		out = append(out, Link{Page: p.Path, Line: line, Target: text[ix[4]:ix[5]]})
	}
	return out
}

// CheckLinks checks every relative link of pages under root: its file
// exists, and its anchor (#...) is one of the target page's anchors. Links
// with a scheme (https:, mailto:) are not followed.
func CheckLinks(root string, pages []Page) []error {
	anchors := map[string]map[string]bool{} // by page, read once
	for _, p := range pages {
		anchors[p.Path] = Anchors(p)
	}
	var errs []error
	for _, p := range pages {
		for _, l := range Links(p) {
			if err := checkLink(root, anchors, l); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w: %s", l.Page, l.Line, ErrBrokenLink, err))
			}
		}
	}
	return errs
}

func checkLink(root string, anchors map[string]map[string]bool, l Link) error {
	if l.Target == "" {
		return errors.New("empty target")
	}
	if scheme.MatchString(l.Target) {
		return nil
	}
	file, anchor, hasAnchor := strings.Cut(l.Target, "#")
	target := l.Page
	if file != "" {
		target = path.Clean(path.Join(path.Dir(l.Page), file))
		if strings.HasPrefix(target, "../") {
			return fmt.Errorf("%s leaves the repository", l.Target)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
			return fmt.Errorf("%s: no such file", l.Target)
		}
	}
	if !hasAnchor {
		return nil
	}
	if !strings.HasSuffix(target, ".md") {
		return fmt.Errorf("%s: an anchor into a file that is not Markdown", l.Target)
	}
	if _, ok := anchors[target]; !ok {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(target)))
		if err != nil {
			return err
		}
		anchors[target] = Anchors(Page{Path: target, Text: string(b)})
	}
	if !anchors[target][anchor] {
		return fmt.Errorf("%s: no heading or anchor %q in %s", l.Target, anchor, target)
	}
	return nil
}

// sectionHeading is a level-2 heading: a section of a page.
var sectionHeading = regexp.MustCompile(`(?m)^## +(.*?)[ \t]*$`)
