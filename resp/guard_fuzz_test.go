package resp_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/resp"
)

// guardFuzzLimits are the limits FuzzGuard picks from: tiny ones to hit
// every boundary often, the table's, and the defaults.
var guardFuzzLimits = []resp.Limits{
	{MaxBulk: 2, MaxArgs: 2, MaxInline: 4, MaxRequest: 16},
	guardTestLimits,
	{},
}

// guardReplies are the replies the guard may write, by error.
var guardReplies = map[error][]string{
	resp.ErrBulkTooLong:     {"-ERR Protocol error: invalid bulk length\r\n"},
	resp.ErrTooManyArgs:     {"-ERR Protocol error: invalid multibulk length\r\n"},
	resp.ErrInlineTooLong:   {"-ERR Protocol error: too big inline request\r\n"},
	resp.ErrRequestTooLarge: {"-ERR Protocol error: too big request\r\n"},
	resp.ErrHeaderTooLong: {
		"-ERR Protocol error: too big mbulk count string\r\n",
		"-ERR Protocol error: too big bulk count string\r\n",
	},
}

// FuzzGuard feeds data, cut into pieces whose sizes come from split, through
// Guard into redcon's Reader. Commands must stay within the limits; when no
// frame breaks a limit, redcon must see exactly what it sees without the
// guard; when one does, it must see exactly the commands before that frame.
// guardReference, which frames the whole input at once, says which applies.
func FuzzGuard(f *testing.F) {
	seeds := []string{
		"PING\r\n",
		guardFrame("SET", "k", "v", "NX", "PX", "30000"),
		guardFrame("GET", "k") + "PING\r\n" + guardFrame("DEL", "k"),
		"SET k 'a b' \"c\\\"d\\n\"\r\n",
		"a\"b\"\r\n\"a\"b\r\n",
		"\r\n\n \r\n",
		"*1\r\n$-0\r\n\r\n*1\r\n$\r\n\r\n*1\r\n$-\r\n\r\n",
		"*0\r\n", "*-1\r\n", "*1\r\n$-1\r\n", "*1\r\n:1\r\n", "*1\r\n$1\r\nab\r\n",
		"*1\r\n$100000000\r\n",
		"*99999999999999999999\r\n", "*-9999999999999999999\r\n", "*1\r\n$-9999999999999999999\r\n",
		"*1\r\n$18446744073709551617\r\nx\r\n",
		"*00000000000000000000000000000001\r\n$1\r\nx\r\n",
		"aaaa\r\r\nbbbbb\r\n",
		// At and just over the limits of the first two presets.
		guardFrame("ab", "cd") + guardFrame("a", "b", "c"),
		guardFrame("a", "b") + guardFrame("abc"),
		"ab c\r\nab cd\r\n",
		guardFrame("a", "b", "c", "d") + guardFrame("a", "b", "c", "d", "e"),
		guardFrame(strings.Repeat("x", 16), strings.Repeat("x", 16), strings.Repeat("x", 8)) +
			guardFrame(strings.Repeat("x", 16), strings.Repeat("x", 16), strings.Repeat("x", 9)),
		strings.Repeat("x", 16) + " " + strings.Repeat("x", 15) + "\r\n" + strings.Repeat("x", 16) + " " + strings.Repeat("x", 16) + "\r\n",
	}
	for i, s := range seeds {
		for preset := range uint8(len(guardFuzzLimits)) {
			f.Add([]byte(s), []byte{}, preset)
			f.Add([]byte(s), []byte{byte(i), 0, 3}, preset)
		}
	}
	f.Fuzz(func(t *testing.T, data, split []byte, preset uint8) {
		lim := guardFuzzLimits[int(preset)%len(guardFuzzLimits)]
		eff := lim.WithDefaults()
		chunks := guardSplit(data, split)
		got := guardRun(lim, chunks, true)
		if got.maxArgs > eff.MaxArgs || got.maxBulk > eff.MaxBulk {
			t.Fatalf("a command got through with %d arguments, the longest %d bytes", got.maxArgs, got.maxBulk)
		}
		var le *resp.LimitError
		limited := errors.As(got.err, &le)
		switch {
		case limited && !slices.Contains(guardReplies[le.Err], got.reply):
			t.Fatalf("on %v the guard wrote %q", got.err, got.reply)
		case !limited && got.reply != "":
			t.Fatalf("on %v the guard wrote %q", got.err, got.reply)
		}

		verdict, at := guardReference(data, eff)
		if verdict == guardEither {
			verdict = guardPass
			if limited {
				verdict = guardStop
			}
		}
		if verdict == guardStop {
			if !limited {
				t.Fatalf("the frame at %d breaks a limit, the guard ended with %v", at, got.err)
			}
			want := guardRun(lim, [][]byte{data[:at]}, false)
			if !slices.Equal(got.cmds, want.cmds) || got.read < at {
				t.Fatalf("the frame at %d breaks a limit: got %d bytes, %v; want %v", at, got.read, got.cmds, want.cmds)
			}
			return
		}
		if limited {
			t.Fatalf("no frame breaks a limit, the guard returned %v", got.err)
		}
		want := guardRun(lim, chunks, false)
		if !slices.Equal(got.cmds, want.cmds) || fmt.Sprint(got.err) != fmt.Sprint(want.err) {
			t.Fatalf("no frame breaks a limit: got %v, %v; want %v, %v", got.cmds, got.err, want.cmds, want.err)
		}
	})
}

// guardSplit cuts data into pieces of split[0]+1, split[1]+1, ... bytes, round
// and round; into one piece when split is empty.
func guardSplit(data, split []byte) [][]byte {
	if len(split) == 0 {
		return [][]byte{data}
	}
	var chunks [][]byte
	for i := 0; len(data) > 0; i++ {
		n := min(len(data), int(split[i%len(split)])+1)
		chunks, data = append(chunks, data[:n]), data[n:]
	}
	return chunks
}

// guardVerdict is what guardReference expects of the guard.
type guardVerdict int

const (
	guardPass   guardVerdict = iota // no frame breaks a limit
	guardStop                       // a frame breaks a limit
	guardEither                     // a frame is both malformed and over a limit, or it is unclear
)

// guardReference frames data whole, as redcon does, and returns what the guard
// must do and where the frame it must stop at starts. It stops at the first
// frame that is malformed, incomplete or over a limit.
func guardReference(data []byte, lim resp.Limits) (guardVerdict, int) {
	for at := 0; at < len(data); {
		var n int
		var v guardVerdict
		if data[at] == '*' {
			n, v = guardRefMultibulk(data[at:], lim)
		} else {
			n, v = guardRefInline(data[at:], lim)
		}
		if n < 0 {
			return v, at
		}
		at += n
	}
	return guardPass, len(data)
}

// guardRefInline returns the length of the inline command at the start of b,
// or -1 and the verdict if the scan ends here. redcon itself splits the words.
func guardRefInline(b []byte, lim resp.Limits) (int, guardVerdict) {
	j := bytes.IndexByte(b, '\n')
	if j < 0 {
		if n := len(b); n > lim.MaxInline+1 || n == lim.MaxInline+1 && b[n-1] != '\r' {
			return -1, guardStop
		}
		return -1, guardEither // the words of a partial line are not modelled
	}
	line := bytes.TrimSuffix(b[:j], []byte("\r"))
	cmds, err := redcon.NewReader(bytes.NewReader(b[:j+1])).ReadCommands()
	if err != nil && err != io.EOF {
		return -1, guardEither // unbalanced quotes: the guard may stop on words before them
	}
	over := len(line) > lim.MaxInline
	for _, c := range cmds {
		over = over || len(c.Args) > lim.MaxArgs
		for _, a := range c.Args {
			over = over || len(a) > lim.MaxBulk
		}
	}
	if over {
		return -1, guardStop
	}
	return j + 1, guardPass
}

// guardRefMultibulk returns the length of the multibulk request at the start
// of b, or -1 and the verdict if the scan ends here.
func guardRefMultibulk(b []byte, lim resp.Limits) (int, guardVerdict) {
	next, count, complete, bad, over := guardRefHeader(b, lim.MaxArgs, true)
	if v, stop := guardRefStop(complete, bad, over || next > lim.MaxRequest); stop {
		return -1, v
	}
	at := next
	for range count {
		switch {
		case at >= len(b):
			return -1, guardPass
		case at+1 > lim.MaxRequest:
			return -1, guardStop
		case b[at] != '$':
			return -1, guardPass
		}
		next, size, complete, bad, over := guardRefHeader(b[at:], lim.MaxBulk, false)
		next += at
		over = over || next > lim.MaxRequest || complete && !bad && next+size+2 > lim.MaxRequest
		if v, stop := guardRefStop(complete, bad, over); stop {
			return -1, v
		}
		at = next + size + 2
		if at > len(b) || b[at-2] != '\r' || b[at-1] != '\n' {
			return -1, guardPass
		}
	}
	return at, guardPass
}

func guardRefStop(complete, bad, over bool) (guardVerdict, bool) {
	switch {
	case over && complete && bad:
		return guardEither, true
	case over:
		return guardStop, true
	case bad || !complete:
		return guardPass, true
	}
	return guardPass, false
}

// guardRefHeader reads the "*N" or "$LEN" line at the start of b. It returns
// where the next line starts (len(b) if the line is incomplete), the value,
// and whether the line is complete, malformed and over a limit: longer than
// 32 bytes, or with leading digits, after a '-' too, worth more than max.
func guardRefHeader(b []byte, max int, count bool) (next, val int, complete, bad, over bool) {
	j := bytes.IndexByte(b, '\n')
	line := b
	if j >= 0 {
		line = b[:j]
	}
	digits := line[1:]
	neg := len(digits) > 0 && digits[0] == '-'
	if neg {
		digits = digits[1:]
	}
	n := 0
	for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
		if val <= max {
			val = val*10 + int(digits[n]-'0')
		}
		n++
	}
	over = len(line) > 32 || val > max
	if j < 0 {
		return len(b), val, false, false, over
	}
	// redcon wants the digits, a '-' only before zeros in a length, then
	// "\r\n"; and at least one element.
	bad = n+1 != len(digits) || digits[n] != '\r' || neg && val != 0 || count && (neg || val == 0)
	return j + 1, val, true, bad, over
}
