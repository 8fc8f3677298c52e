package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/docstest"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// docSetups start the lockproxy a transcript runs against, named by the
// "<!-- transcript: NAME[,NAME...] -->" line before its block ("embedded"
// when there is none: what `go run ./cmd/lockproxy` starts; several names:
// the transcript runs on each), and return the environment its $VARIABLES
// read.
var docSetups = map[string]func(t *testing.T) (*instance.Instance, map[string]string){
	"embedded": func(t *testing.T) (*instance.Instance, map[string]string) {
		return startInstance(t, docConfig()), nil
	},
	"redlock": func(t *testing.T) (*instance.Instance, map[string]string) {
		return startInstance(t, testConfig(redistest.StartN(t, 3, redistest.Options{}))), nil
	},
	"users": func(t *testing.T) (*instance.Instance, map[string]string) {
		cfg := docConfig()
		cfg.Users = []instance.UserConfig{{Name: "billing", Password: "billing-pw", Keys: []string{"billing:*"}, Commands: "native"}}
		return startInstance(t, cfg), map[string]string{"BILLING_PW": "billing-pw"}
	},
	"passthrough": func(t *testing.T) (*instance.Instance, map[string]string) {
		cfg := docConfig()
		cfg.Passthrough.Address = redistest.Start(t, redistest.Options{}).Addr()
		cfg.Passthrough.LockKeys = []string{"lock:*", "*:lock"}
		return startInstance(t, cfg), nil
	},
}

// docConfig is the default configuration (the embedded backend) on a free
// loopback port.
func docConfig() instance.Config {
	cfg := instance.Default()
	cfg.Listen = "127.0.0.1:0"
	return cfg
}

// TestDocsTranscripts runs every redis-cli transcript of README.md and
// docs/*.md against a fresh lockproxy, one per transcript, and compares
// the output line by line: tokens are random and validities shrink while
// the test runs, so a 32-hex-digit token on the page stands for the one
// the run printed (and for it in later commands), and an integer of 1000
// or more may differ by 5% (docstest.Matcher). Anything else that differs
// fails: the page no longer shows what lockproxy does.
func TestDocsTranscripts(t *testing.T) {
	pages, err := docstest.Load("..")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, p := range pages {
		for _, b := range docstest.Blocks(p) {
			if !docstest.IsTranscript(b) {
				continue
			}
			setups := strings.Split(b.Setup, ",")
			if b.Setup == "" {
				setups = []string{"embedded"}
			}
			for _, name := range setups {
				ran++
				t.Run(fmt.Sprintf("%s:%d/%s", p.Path, b.Line, name), func(t *testing.T) { runTranscript(t, b, name) })
			}
		}
	}
	if ran < 5 {
		t.Fatalf("found %d transcripts in the docs; the README alone has two", ran)
	}
}

func runTranscript(t *testing.T, b docstest.Block, name string) {
	sessions, err := docstest.ParseTranscript(b)
	if err != nil {
		t.Fatal(err)
	}
	setup, ok := docSetups[name]
	if !ok {
		t.Fatalf("%s:%d: no transcript setup %q (docs_test.go's docSetups)", b.Page, b.Line, name)
	}
	in, env := setup(t)
	m := docstest.NewMatcher()
	started := time.Now()
	for _, s := range sessions {
		runSession(t, in.Addr(), env, m, b.Page, s, started)
	}
}

// runSession runs one redis-cli of a transcript against addr and compares
// its output with the page's; a validity may be lower by the time the
// transcript has run since started.
func runSession(t *testing.T, addr string, env map[string]string, m *docstest.Matcher, page string, s docstest.Session, started time.Time) {
	t.Helper()
	opts := cliOptions(addr, s.Options, env)
	var input string
	var want []string
	if s.OneShot {
		for _, w := range s.Commands[0].Args {
			opts = append(opts, m.Substitute(w))
		}
		want = s.Commands[0].Want
	} else {
		for _, c := range s.Commands {
			input += m.Substitute(c.Text) + "\n"
			want = append(want, c.Want...)
		}
	}
	got := runCLI(t, opts, input)
	m.SlackMS = time.Since(started).Milliseconds()
	if err := m.Lines(want, got); err != nil {
		t.Errorf("%s:%d: %v\nthe run printed:\n%s", page, s.Line, err, strings.Join(got, "\n"))
	}
}

// cliOptions are the page's redis-cli options pointed at addr, with
// $VARIABLES from env, printing replies as redis-cli does on a terminal.
func cliOptions(addr string, page []string, env map[string]string) []string {
	host, port, _ := net.SplitHostPort(addr)
	out := []string{"-h", host, "-p", port, "--no-raw"}
	for i := 0; i < len(page); i++ {
		switch page[i] {
		case "-h", "-p":
			i++ // the page's address: this test's instead
		default:
			out = append(out, expandVar(page[i], env))
		}
	}
	return out
}

func expandVar(w string, env map[string]string) string {
	if v, ok := env[strings.TrimPrefix(w, "$")]; ok && strings.HasPrefix(w, "$") {
		return v
	}
	return w
}

// runCLI runs redis-cli with args and input on its standard input and
// returns its output lines (standard error, such as the password warning,
// apart).
func runCLI(t *testing.T, args []string, input string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "redis-cli", args...)
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("redis-cli %q: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	out := strings.TrimRight(stdout.String(), "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}
