package resp_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

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
	resp.ErrBufferedTooMuch: {"-ERR max buffered bytes of all clients reached\r\n"},
	resp.ErrHeaderTooLong: {
		"-ERR Protocol error: too big mbulk count string\r\n",
		"-ERR Protocol error: too big bulk count string\r\n",
	},
}

// FuzzGuard feeds data, cut into pieces whose sizes come from split, through
// Guard into redcon's Reader, which must neither hang nor panic (a huge
// count or length would make it). When the guard refuses nothing, redcon
// must see exactly what it sees without the guard; when the guard refuses a
// command, it must have written Redis's reply and redcon must have seen
// exactly the commands in the bytes before it.
func FuzzGuard(f *testing.F) {
	for i, s := range guardFuzzSeeds {
		for preset := range uint8(len(guardFuzzLimits)) {
			f.Add([]byte(s), []byte{}, preset)
			f.Add([]byte(s), []byte{byte(i), 0, 3}, preset)
		}
	}
	f.Fuzz(fuzzGuard)
}

// guardFuzzSeeds are the inputs FuzzGuard and FuzzServerRead start from.
var guardFuzzSeeds = []string{
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

func fuzzGuard(t *testing.T, data, split []byte, preset uint8) {
	{
		lim := guardFuzzLimits[int(preset)%len(guardFuzzLimits)]
		chunks := guardSplit(data, split)
		got := guardRun(lim, chunks, true)
		var le *resp.LimitError
		if errors.As(got.err, &le) {
			if !slices.Contains(guardReplies[le.Err], got.reply) {
				t.Fatalf("on %v the guard wrote %q", got.err, got.reply)
			}
			// The guard framed these bytes, so redcon cannot hang on them.
			want := guardRun(lim, [][]byte{data[:got.read]}, false)
			if !slices.Equal(got.cmds, want.cmds) {
				t.Fatalf("refused after %d bytes: got %v; want %v", got.read, got.cmds, want.cmds)
			}
			return
		}
		if got.reply != "" {
			t.Fatalf("on %v the guard wrote %q", got.err, got.reply)
		}
		want := guardRun(lim, chunks, false)
		if !slices.Equal(got.cmds, want.cmds) || fmt.Sprint(got.err) != fmt.Sprint(want.err) {
			t.Fatalf("nothing refused: got %v, %v; want %v, %v", got.cmds, got.err, want.cmds, want.err)
		}
	}
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

// FuzzServerRead feeds data, cut as FuzzGuard cuts it, to the reading of
// a server connection's loop: the guard, the loop's buffers, and redcon's
// parser, command by command. It must neither hang nor panic, and it must
// see each command redcon's Reader sees when fed the same bytes one at a
// time (so that each of its reads completes at most one command), and end
// with the same protocol error, if any; when the guard refuses a command,
// the loop must have seen exactly the commands in the bytes before it.
func FuzzServerRead(f *testing.F) {
	for i, s := range guardFuzzSeeds {
		for preset := range uint8(len(guardFuzzLimits)) {
			f.Add([]byte(s), []byte{}, preset)
			f.Add([]byte(s), []byte{byte(i), 0, 3}, preset)
		}
	}
	f.Fuzz(func(t *testing.T, data, split []byte, preset uint8) {
		lim := guardFuzzLimits[int(preset)%len(guardFuzzLimits)]
		cmds, read, err := resp.ServerRead(&guardConn{chunks: guardSplit(data, split)}, lim)
		var got []string
		for _, c := range cmds {
			got = append(got, fmt.Sprintf("%q %q", c.Raw, c.Args))
		}
		var le *resp.LimitError
		refused := errors.As(err, &le)
		if refused {
			data = data[:read]
		}
		want := guardRun(lim, guardSplit(data, []byte{0}), false)
		if !slices.Equal(got, want.cmds) {
			t.Fatalf("the loop saw %v; redcon %v", got, want.cmds)
		}
		if !refused && fmt.Sprint(err) != fmt.Sprint(want.err) && !errors.Is(err, resp.ErrMalformedRequest) {
			t.Fatalf("the loop ended with %v; redcon with %v", err, want.err)
		}
	})
}
