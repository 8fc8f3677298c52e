package docstest

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrTranscript is wrapped by every error about a transcript's shape.
var ErrTranscript = errors.New("transcript")

// Session is one redis-cli run of a transcript: either a one-shot
// ("$ redis-cli -p 6380 LOCK k", one command given as arguments) or an
// interactive session ("$ redis-cli -3 -p 6380", or bare prompt lines)
// whose commands are typed after "127.0.0.1:6380> " prompts.
type Session struct {
	Line     int
	Options  []string // redis-cli's options as written, e.g. -p 6380
	OneShot  bool     // the single command is in Commands[0].Args
	Commands []Command
}

// Command is one command and the output it should print.
type Command struct {
	Line int
	Args []string // a one-shot's command words, unquoted
	Text string   // an interactive command as typed
	Want []string // the output lines, annotations ("  <- why") removed
}

var (
	prompt     = regexp.MustCompile(`^\S+:\d+(?:\(TX\))?> ?(.*)$`) // redis-cli shows (TX) inside MULTI
	shellLine  = regexp.MustCompile(`^\$ redis-cli(\s.*)?$`)
	annotation = regexp.MustCompile(`\s{2,}<-.*$`)
)

// IsTranscript reports whether b shows a redis-cli session: a block without
// a language (or "console"/"text") whose first line is "$ redis-cli ..." or
// a "host:port> " prompt ("host:port(TX)> " inside MULTI).
func IsTranscript(b Block) bool {
	if b.Lang != "" && b.Lang != "console" && b.Lang != "text" {
		return false
	}
	first, _, _ := strings.Cut(strings.TrimLeft(b.Body, "\n"), "\n")
	return shellLine.MatchString(first) || prompt.MatchString(first)
}

// ParseTranscript splits b into sessions.
func ParseTranscript(b Block) ([]Session, error) {
	var out []Session
	var cmd *Command
	for i, line := range strings.Split(strings.TrimRight(b.Body, "\n"), "\n") {
		n := b.Line + 1 + i
		switch {
		case shellLine.MatchString(line):
			s, err := parseShell(n, strings.TrimPrefix(line, "$ redis-cli"))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", b.Page, n, err)
			}
			out = append(out, s)
			cmd = last(out)
		case prompt.MatchString(line):
			if len(out) == 0 || out[len(out)-1].OneShot {
				out = append(out, Session{Line: n, Options: []string{"-p", "6380"}})
			}
			s := &out[len(out)-1]
			s.Commands = append(s.Commands, Command{Line: n, Text: prompt.FindStringSubmatch(line)[1]})
			cmd = &s.Commands[len(s.Commands)-1]
		case strings.HasPrefix(line, "$ "):
			return nil, fmt.Errorf("%s:%d: %w: only redis-cli is run: %q", b.Page, n, ErrTranscript, line)
		case cmd == nil:
			return nil, fmt.Errorf("%s:%d: %w: output before any command", b.Page, n, ErrTranscript)
		default:
			cmd.Want = append(cmd.Want, strings.TrimRight(annotation.ReplaceAllString(line, ""), " \t"))
		}
	}
	return out, nil
}

// last is the command of the last session when it is a one-shot (its
// output follows), else nil: an interactive session's output follows its
// prompt lines.
func last(ss []Session) *Command {
	s := &ss[len(ss)-1]
	if !s.OneShot {
		return nil
	}
	return &s.Commands[0]
}

// redis-cli's options that take a value, and those that do not.
var (
	valueOptions = map[string]bool{"-h": true, "-p": true, "-a": true, "-n": true, "-u": true,
		"--user": true, "--pass": true, "--cacert": true, "--cert": true, "--key": true, "--sni": true}
	flagOptions = map[string]bool{"-2": true, "-3": true, "-c": true, "--tls": true, "--raw": true,
		"--no-raw": true, "--no-auth-warning": true}
)

func parseShell(line int, rest string) (Session, error) {
	words, err := SplitWords(rest)
	if err != nil {
		return Session{}, err
	}
	s := Session{Line: line}
	for len(words) > 0 && strings.HasPrefix(words[0], "-") {
		switch {
		case valueOptions[words[0]] && len(words) > 1:
			s.Options, words = append(s.Options, words[0], words[1]), words[2:]
		case flagOptions[words[0]]:
			s.Options, words = append(s.Options, words[0]), words[1:]
		default:
			return s, fmt.Errorf("%w: redis-cli option %q is not known to docstest", ErrTranscript, words[0])
		}
	}
	if len(words) > 0 {
		s.OneShot = true
		s.Commands = []Command{{Line: line, Args: words}}
	}
	return s, nil
}

// SplitWords splits a command line as a POSIX shell does for plain words
// and '...' and "..." quotes (a backslash escapes the next character outside
// single quotes). Nothing is expanded.
func SplitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("%w: unterminated quote in %q", ErrTranscript, s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
