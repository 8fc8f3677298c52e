package main

import (
	"fmt"
	"testing"

	"github.com/lockproxy/lockproxy/internal/docstest"
)

// configSnippetErrors loads every ```toml block of pages as lockproxy's
// config file, with lockproxy's own loader (configure: decoding, unknown
// keys, validation), and returns what does not load.
func configSnippetErrors(t *testing.T, pages []docstest.Page) (errs []error, snippets int) {
	for _, p := range pages {
		for _, b := range docstest.Blocks(p) {
			if b.Lang != "toml" {
				continue
			}
			snippets++
			if _, err := configure([]string{"--config", writeConfig(t, b.Body)}, noEnv); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w", b.Page, b.Line, err))
			}
		}
	}
	return errs, snippets
}

// TestDocsConfigSnippetsLoad: every config snippet in README.md and
// docs/*.md is a config file lockproxy starts with.
func TestDocsConfigSnippetsLoad(t *testing.T) {
	pages, err := docstest.Load("../..")
	if err != nil {
		t.Fatal(err)
	}
	errs, n := configSnippetErrors(t, pages)
	for _, err := range errs {
		t.Error(err)
	}
	if n == 0 {
		t.Fatal("no ```toml block found in the docs")
	}
}

// TestDocsConfigSnippetsCheckFails: a snippet with a syntax error, an
// unknown key or a value lockproxy refuses is reported; a good one is not.
func TestDocsConfigSnippetsCheckFails(t *testing.T) {
	page := docstest.Page{Path: "x.md", Text: "```toml\n[locks]\nlock_delay_ms = 100\n```\n" +
		"```toml\n[locks\n```\n" +
		"```toml\n[locks]\nlock_dalay_ms = 100\n```\n" +
		"```toml\n[locks]\nlock_delay_ms = 600000\n```\n"}
	errs, n := configSnippetErrors(t, []docstest.Page{page})
	if n != 4 || len(errs) != 3 {
		t.Fatalf("%d snippets, errors %v; want 4 snippets and the last three refused", n, errs)
	}
}
