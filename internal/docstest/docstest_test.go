package docstest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDocsLinksResolve walks every relative link of README.md and docs/*.md
// and fails on a missing file or an anchor that no heading makes.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := Load("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 2 {
		t.Fatalf("found %d pages, want README.md and docs/*.md", len(pages))
	}
	for _, err := range CheckLinks("../..", pages) {
		t.Error(err)
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Fencing tokens: why they only go up":           "fencing-tokens-why-they-only-go-up",
		"Redlock's restart rule, enforced":              "redlocks-restart-rule-enforced",
		"Pub/sub":                                       "pubsub",
		"Lock-delay":                                    "lock-delay",
		"`SET NX` and `DEL`":                            "set-nx-and-del",
		"Replayed clients: Redisson and Spring pub/sub": "replayed-clients-redisson-and-spring-pubsub",
		"A [linked](x.md) heading_1":                    "a-linked-heading_1",
		"Ünïcode and  two spaces":                       "ünïcode-and--two-spaces",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func write(t *testing.T, root, name, body string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckLinksReportsBrokenOnes: every kind of broken link is reported,
// with its line, and nothing else is.
func TestCheckLinksReportsBrokenOnes(t *testing.T) {
	root := t.TempDir()
	write(t, root, "README.md", "# Top\n\n## Same name\n\n## Same name\n\n"+
		"[ok](docs/a.md#second-part) [ok](#same-name-1) [ok](docs/a.md) [ok](https://x.y/#z)\n"+
		"[bad file](docs/missing.md)\n"+
		"[bad anchor](docs/a.md#no-such)\n"+
		"[bad local](#same-name-2) `[in code](nowhere.md)`\n"+
		"```\n[in a block](nowhere.md)\n```\n"+
		"[anchor into code](go.mod#L1) [outside](../x.md)\n")
	write(t, root, "docs/a.md", "# A\n\n## Second part\n\n[back](../README.md#top)\n")
	write(t, root, "go.mod", "module x\n")
	pages, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, err := range CheckLinks(root, pages) {
		if !errors.Is(err, ErrBrokenLink) {
			t.Errorf("%v does not wrap ErrBrokenLink", err)
		}
		got = append(got, err.Error())
	}
	want := []string{"README.md:8: ", "README.md:9: ", "README.md:10: ", "README.md:14: ", "README.md:14: "}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d: %q, want it at %s", i, got[i], want[i])
		}
	}
}

func TestBlocksAndSetup(t *testing.T) {
	p := Page{Path: "x.md", Text: "text\n\n<!-- transcript: users -->\n```\n$ redis-cli PING\nPONG\n```\n\n```toml\na = 1\n```\n"}
	bs := Blocks(p)
	if len(bs) != 2 {
		t.Fatalf("%d blocks, want 2: %+v", len(bs), bs)
	}
	if bs[0].Setup != "users" || bs[0].Line != 4 || !IsTranscript(bs[0]) {
		t.Errorf("first block %+v: want setup users at line 4, a transcript", bs[0])
	}
	if bs[1].Lang != "toml" || bs[1].Body != "a = 1\n" || bs[1].Setup != "" || IsTranscript(bs[1]) {
		t.Errorf("second block %+v: want toml 'a = 1', no setup, no transcript", bs[1])
	}
}

func TestParseTranscript(t *testing.T) {
	b := Block{Page: "x.md", Line: 10, Body: `$ redis-cli -p 6380 LOCK k PX 1000
1) "tok"      <- the token
2) (integer) 1
$ redis-cli -3 -p 6380 --user u --pass "$PW"
127.0.0.1:6380> CLIENT SETNAME "a b"
OK
127.0.0.1:6380> PING
PONG
$ redis-cli -p 6380 EVAL "return 'x y'" 0
"x y"
127.0.0.1:6380> GET k
(nil)
`}
	ss, err := ParseTranscript(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 4 {
		t.Fatalf("%d sessions, want 4: %+v", len(ss), ss)
	}
	one := ss[0]
	if !one.OneShot || !slices.Equal(one.Options, []string{"-p", "6380"}) || one.Line != 11 ||
		!slices.Equal(one.Commands[0].Args, []string{"LOCK", "k", "PX", "1000"}) ||
		!slices.Equal(one.Commands[0].Want, []string{`1) "tok"`, `2) (integer) 1`}) {
		t.Errorf("one-shot session %+v", one)
	}
	in := ss[1]
	if in.OneShot || !slices.Equal(in.Options, []string{"-3", "-p", "6380", "--user", "u", "--pass", "$PW"}) ||
		len(in.Commands) != 2 || in.Commands[0].Text != `CLIENT SETNAME "a b"` || !slices.Equal(in.Commands[1].Want, []string{"PONG"}) {
		t.Errorf("interactive session %+v", in)
	}
	if !slices.Equal(ss[2].Commands[0].Args, []string{"EVAL", "return 'x y'", "0"}) {
		t.Errorf("quoted words: %q", ss[2].Commands[0].Args)
	}
	if ss[3].OneShot || ss[3].Commands[0].Text != "GET k" || !slices.Equal(ss[3].Options, []string{"-p", "6380"}) {
		t.Errorf("bare prompt after a one-shot: %+v", ss[3])
	}
	for _, bad := range []string{"OK\n", "$ docker run x\n", "$ redis-cli --frob PING\n", "$ redis-cli SET k 'v\n"} {
		if _, err := ParseTranscript(Block{Page: "x.md", Body: bad}); !errors.Is(err, ErrTranscript) {
			t.Errorf("ParseTranscript(%q) = %v, want ErrTranscript", bad, err)
		}
	}
	tx, err := ParseTranscript(Block{Page: "x.md", Body: "127.0.0.1:6380> MULTI\nOK\n127.0.0.1:6380(TX)> PING\nQUEUED\n"})
	if err != nil || len(tx) != 1 || len(tx[0].Commands) != 2 || tx[0].Commands[1].Text != "PING" {
		t.Errorf("redis-cli's (TX) prompt inside MULTI: %+v, %v", tx, err)
	}
}

func TestMatcher(t *testing.T) {
	m := NewMatcher()
	page := "8f0c7f3f4e9d2a61b5c0d7e3a9f18c24"
	run := "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{`1) "` + page + `"`, `1) "` + run + `"`, true}, // bound
		{`UNLOCK k ` + page, `UNLOCK k ` + run, true},
		{`x ` + page, `x ffffffffffffffffffffffffffffffff`, false}, // bound to another
		{`1) "` + page + `"`, `1) "short"`, false},
		{`3) (integer) 29695`, `3) (integer) 29990`, true}, // a validity
		{`3) (integer) 29695`, `3) (integer) 20000`, false},
		{`2) (integer) 1`, `2) (integer) 2`, false}, // a fence is exact
		{`(nil)`, `(nil)  `, true},
		{`"d8bf54f01b6341556ce3dcfe5e15a21a026da55a"`, `"d8bf54f01b6341556ce3dcfe5e15a21a00000000"`, false}, // a SHA1 is exact
		{`ERR unknown command 'FROB'`, `ERR unknown command 'FROG'`, false},
	} {
		if got := m.Line(c.want, c.got); got != c.ok {
			t.Errorf("Line(%q, %q) = %v, want %v", c.want, c.got, got, c.ok)
		}
	}
	m.SlackMS = 5000
	if !m.Line("(integer) 29695", "(integer) 24000") || m.Line("(integer) 29695", "(integer) 36000") {
		t.Error("SlackMS widens the tolerance below, and only below")
	}
	if got := m.Substitute("UNLOCK k " + page); got != "UNLOCK k "+run {
		t.Errorf("Substitute: %q", got)
	}
	if err := m.Lines([]string{"a", "b"}, []string{"a"}); err == nil {
		t.Error("Lines: a missing line matched")
	}
	if err := m.Lines([]string{"a"}, []string{"a", "b"}); err == nil {
		t.Error("Lines: an extra line matched")
	}
}

// TestReadmeReachesEverySection: every page in docs/ is linked from the
// README, and so is every section (##) of the topic pages, so that a
// reader is one click from any of them. lock-scripts.md is reached as a
// page: its sections are the catalogue's. docs/pending-<issue>.md pages are
// text waiting to be merged into the topic pages, not pages of their own
// (their links, snippets and transcripts are checked all the same).
func TestReadmeReachesEverySection(t *testing.T) {
	pages, err := Load("../..")
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range Links(pages[0]) {
		linked[l.Target] = true
	}
	for _, p := range pages[1:] {
		if strings.HasPrefix(p.Path, "docs/pending-") {
			continue
		}
		if !linked[p.Path] {
			t.Errorf("README.md does not link %s", p.Path)
		}
		if p.Path == "docs/lock-scripts.md" {
			continue
		}
		for _, m := range sectionHeading.FindAllStringSubmatch(prose(p), -1) {
			if target := p.Path + "#" + Slug(m[1]); !linked[target] {
				t.Errorf("README.md does not link %s (%q)", target, m[1])
			}
		}
	}
}
