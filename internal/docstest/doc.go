// Package docstest reads lockproxy's Markdown pages (README.md and
// docs/*.md) for the docs tests: their relative links and GitHub-style
// anchors, their fenced code blocks, and the redis-cli transcripts among
// those blocks.
//
// It owns no server and runs nothing: the tests that start lockproxy
// (instance) and load config files (cmd/lockproxy) use it to find what to
// check. A transcript line is matched with tolerance only where a running
// server differs by nature: a 32-hex-digit token is random (bound on first
// sight, then the same everywhere in the transcript), and an integer of
// 1000 or more (a validity in ms) may differ by 5%.
package docstest
