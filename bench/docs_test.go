package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const samplePage = `# Benchmarks

Prose that stays.

<!-- bench:locks:begin -->
old locks run
<!-- bench:locks:end -->

More prose.

<!-- bench:passthrough:begin -->
old passthrough run
<!-- bench:passthrough:end -->
`

var sampleRun = docsRun{
	block:   "locks",
	command: commandLine([]string{"-docs", "docs/benchmarks.md", "-impl", "redis, lockproxy"}),
	started: time.Date(2026, 11, 28, 2, 30, 0, 0, time.UTC),
	machine: "machine: NumCPU=2 GOMAXPROCS=2 go1.26.8 linux/amd64; load average at start: 0.20 0.88 1.35",
	took:    99 * time.Second,
	output: "machine: NumCPU=2 ...\nsetup (redlock): ...\n| table |\n\n" +
		"bars (issue 16; each a ratio of this run's figures):\n" +
		"bar redlock c=32 cycles/s lockproxy >= 0.5x redis: 11822 against 68102, 0.17x: missed\n" +
		"bar RSS with 100000 held locks < 200 MB: 76.8 MB against 200 MB: met\n" +
		"run took 1m39s (lockproxy's build included)\n",
}

// TestDocsRunRendersDateMachineLoadAndEveryBar: the block says when, on
// what machine under what load, by which command, and has every bar line.
func TestDocsRunRendersDateMachineLoadAndEveryBar(t *testing.T) {
	got := sampleRun.render()
	for _, want := range []string{
		"`go run ./bench -docs docs/benchmarks.md -impl \"redis, lockproxy\"`",
		"2026-11-28 02:30 UTC", "the run took 1m39s",
		"load average at start: 0.20 0.88 1.35",
		"```\nbar redlock c=32 cycles/s lockproxy >= 0.5x redis: 11822 against 68102, 0.17x: missed\n" +
			"bar RSS with 100000 held locks < 200 MB: 76.8 MB against 200 MB: met\n```",
		"setup (redlock): ...", // the whole output too
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered run lacks %q:\n%s", want, got)
		}
	}
	pt := docsRun{block: "passthrough", output: "32     ratio             0.56x   lockproxy / direct\n" +
		"bar pt passthrough c=32 commands/s: lockproxy 30000, twemproxy 30000, ratio 1.00x, limit >= 1x: met\n"}
	if !strings.Contains(pt.render(), "Every bar line of the run:\n\n```\nbar pt passthrough c=32 commands/s: lockproxy 30000, twemproxy 30000, ratio 1.00x, limit >= 1x: met\n```") {
		t.Errorf("a passthrough run's bar lines, and those only, are its bars:\n%s", pt.render())
	}
}

// TestWriteDocsReplacesOnlyItsBlock: a run replaces its own block, again
// and again, and leaves the prose and the other block as they were.
func TestWriteDocsReplacesOnlyItsBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte(samplePage), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := writeDocs(path, sampleRun); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(samplePage, "old locks run\n", sampleRun.render(), 1)
	if string(b) != want {
		t.Errorf("page after two runs:\n%s\nwant:\n%s", b, want)
	}
}

func TestCheckDocsWantsTheMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	for _, page := range []string{"# no markers\n", "<!-- bench:locks:end -->\n<!-- bench:locks:begin -->\n"} {
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := checkDocs(path, "locks"); !errors.Is(err, errNoBlock) {
			t.Errorf("checkDocs of %q = %v, want errNoBlock", page, err)
		}
		if err := writeDocs(path, sampleRun); !errors.Is(err, errNoBlock) {
			t.Errorf("writeDocs into %q = %v, want errNoBlock", page, err)
		}
	}
}

// TestBenchmarksPageHasBothBlocks: the committed page is one -docs can
// write, for both kinds of run, and says which command writes it.
func TestBenchmarksPageHasBothBlocks(t *testing.T) {
	const page = "../docs/benchmarks.md"
	for _, block := range []string{"locks", "passthrough"} {
		if err := checkDocs(page, block); err != nil {
			t.Errorf("%s, block %s: %v", page, block, err)
		}
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"go run ./bench -docs docs/benchmarks.md", "go run ./bench -passthrough -docs docs/benchmarks.md"} {
		if !strings.Contains(string(b), cmd) {
			t.Errorf("%s does not say that %q writes it", page, cmd)
		}
	}
}

func TestDocsFlag(t *testing.T) {
	o, err := parseFlags([]string{"-docs", "docs/benchmarks.md", "-passthrough"})
	if err != nil || o.docs != "docs/benchmarks.md" || docsBlock(o) != "passthrough" {
		t.Errorf("parseFlags: %+v, %v", o.docs, err)
	}
	if o, _ := parseFlags(nil); o.docs != "" || docsBlock(o) != "locks" {
		t.Errorf("default: docs %q block %q, want none and locks", o.docs, docsBlock(o))
	}
}
