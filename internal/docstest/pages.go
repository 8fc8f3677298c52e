package docstest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Page is one Markdown file.
type Page struct {
	Path string // relative to the repository root, slash-separated
	Text string
}

// Load reads README.md and every docs/*.md under root, README first.
func Load(root string) ([]Page, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(docs)
	var pages []Page
	for _, f := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, f)
		if err != nil {
			return nil, err
		}
		pages = append(pages, Page{Path: filepath.ToSlash(rel), Text: string(b)})
	}
	return pages, nil
}

// Block is one fenced code block.
type Block struct {
	Page  string
	Line  int    // of the opening fence, 1-based
	Lang  string // the info string's first word: "toml", "sh", "" ...
	Body  string // the lines between the fences, each ending in "\n"
	Setup string // NAME of a "<!-- transcript: NAME -->" line right before the fence
}

var (
	fence       = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")
	setupMarker = regexp.MustCompile(`^<!--\s*transcript:\s*(\S+)\s*-->\s*$`)
)

// Blocks returns p's fenced code blocks in order. An unclosed block runs to
// the end of the page, as GitHub renders it.
func Blocks(p Page) []Block {
	var out []Block
	var cur *Block
	var closer, prev string
	for i, line := range strings.Split(p.Text, "\n") {
		m := fence.FindStringSubmatch(line)
		switch {
		case cur == nil && m != nil:
			cur = &Block{Page: p.Path, Line: i + 1, Lang: m[2], Setup: setupOf(prev)}
			closer = m[1]
		case cur != nil && m != nil && strings.HasPrefix(m[1], closer) && m[2] == "":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.Body += line + "\n"
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

func setupOf(line string) string {
	if m := setupMarker.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
		return m[1]
	}
	return ""
}

// prose is p's text with every fenced block's lines blanked, so that links
// and headings are read from the prose only; line numbers are kept.
func prose(p Page) string {
	lines := strings.Split(p.Text, "\n")
	in, closer := false, ""
	for i, line := range lines {
		m := fence.FindStringSubmatch(line)
		switch {
		case !in && m != nil:
			in, closer = true, m[1]
			lines[i] = ""
		case in && m != nil && strings.HasPrefix(m[1], closer) && m[2] == "":
			in = false
			lines[i] = ""
		case in:
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}
