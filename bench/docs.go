package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// errNoBlock: the page has no marked block for this kind of run.
var errNoBlock = errors.New("no marked block")

// docsRun is one complete run of the bench as -docs writes it into a page
// (docs/benchmarks.md): between the lines "<!-- bench:BLOCK:begin -->" and
// "<!-- bench:BLOCK:end -->", leaving the rest of the page alone.
type docsRun struct {
	block   string // "locks" or "passthrough"
	command string // the command line that ran it
	started time.Time
	machine string // machineLine() at the start
	took    time.Duration
	output  string // everything the run printed on standard output
}

// docsBlock is the block a run of o replaces.
func docsBlock(o options) string {
	if o.passthrough {
		return "passthrough"
	}
	return "locks"
}

func markers(block string) (begin, end string) {
	return "<!-- bench:" + block + ":begin -->\n", "<!-- bench:" + block + ":end -->\n"
}

// replaceBlock returns page with the text between block's markers set to
// body.
func replaceBlock(page, block, body string) (string, error) {
	begin, end := markers(block)
	i := strings.Index(page, begin)
	j := strings.Index(page, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("%w: want the lines %q and %q, in that order", errNoBlock, strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	return page[:i+len(begin)] + body + page[j:], nil
}

// checkDocs reads the page at path and checks that it has block's markers,
// before a run of minutes is spent.
func checkDocs(path, block string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = replaceBlock(string(b), block, "")
	return err
}

// writeDocs puts r into its block of the page at path, replacing the file
// whole (a temporary file renamed over it).
func writeDocs(path string, r docsRun) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	page, err := replaceBlock(string(b), r.block, r.render())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".benchmarks-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(page); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// barLine is a line of a run's verdicts: a bar of issue 29, locks' or
// passthrough's.
var barLine = regexp.MustCompile(`^bar `)

// render is r as the page shows it: when, on what machine under what load,
// every bar line, then the whole output.
func (r docsRun) render() string {
	var bars []string
	for _, l := range strings.Split(r.output, "\n") {
		if barLine.MatchString(l) {
			bars = append(bars, l)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Written by `%s` on %s; the run took %v.\n\n", r.command,
		r.started.UTC().Format("2006-01-02 15:04 MST"), r.took.Round(time.Second))
	fmt.Fprintf(&b, "%s\n\n", r.machine)
	if len(bars) > 0 {
		fmt.Fprintf(&b, "Every bar line of the run:\n\n```\n%s\n```\n\n", strings.Join(bars, "\n"))
	}
	fmt.Fprintf(&b, "The whole output:\n\n```\n%s\n```\n", strings.TrimRight(r.output, "\n"))
	return b.String()
}

// commandLine is how args were given to the bench, for the page.
func commandLine(args []string) string {
	words := []string{"go run ./bench"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'`$") {
			a = strconv.Quote(a)
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}
