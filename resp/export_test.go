package resp

import (
	"net"

	"github.com/tidwall/redcon"
)

// ServerRead reads c as a connection's loop reads it, through Guard with
// lim, until the reading ends: the commands the loop would serve, how many
// bytes the guard passed on, and the error that ended it (redcon's protocol
// error where the loop would reply with it).
func ServerRead(c net.Conn, lim Limits) (cmds []redcon.Command, read int, err error) {
	src := fixedLimits(lim)
	r := cmdReader{g: newGuard(c, src, newBudget(src.Load().MaxBuffered))}
	for {
		before := len(r.buf)
		batch, err := r.next(nil)
		read += readSince(batch, before, len(r.buf))
		if err != nil {
			if perr := r.rejected(err); perr != nil {
				return cmds, read, perr
			}
			return cmds, read, err
		}
		for _, raw := range batch {
			cmd, ok, perr := parseCommand(raw)
			if perr != nil {
				return cmds, read, perr
			}
			if ok {
				cmds = append(cmds, cmd)
			}
		}
	}
}

// readSince is how many bytes a call of next read: those of the commands
// it returned and those left over, less those left over before it.
func readSince(batch [][]byte, before, after int) int {
	n := after - before
	for _, raw := range batch {
		n += len(raw)
	}
	return n
}

// Abort closes c as CLIENT KILL, Drop and Server.Close close a client
// (guardConn's Abort).
func Abort(c net.Conn) error {
	src := fixedLimits(Limits{})
	return newGuard(c, src, newBudget(0)).Abort()
}
