package passthrough

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// upConn is one connection to the data Redis, used by one client at a time.
type upConn struct {
	nc    net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	proto int          // protocol version the connection speaks
	id    atomic.Int64 // its CLIENT ID on the data Redis; 0 until asked (read by other clients' CLIENT UNBLOCK)
	buf   []byte
}

// dial connects to the data Redis, authenticates, selects the database and
// speaks proto.
func dial(cfg Config, proto int) (*upConn, error) {
	d := &net.Dialer{Timeout: cfg.Timeout}
	var nc net.Conn
	var err error
	if cfg.TLS != nil {
		nc, err = tls.DialWithDialer(d, "tcp", cfg.Addr, cfg.TLS)
	} else {
		nc, err = d.Dial("tcp", cfg.Addr)
	}
	if err != nil {
		return nil, err
	}
	u := &upConn{nc: nc, br: bufio.NewReaderSize(nc, 32<<10), bw: bufio.NewWriterSize(nc, 32<<10), proto: 2}
	if err := u.setup(cfg, proto); err != nil {
		nc.Close()
		return nil, err
	}
	return u, nil
}

func (u *upConn) setup(cfg Config, proto int) error {
	if cfg.Password != "" {
		auth := []string{"AUTH", cfg.Password}
		if cfg.Username != "" {
			auth = []string{"AUTH", cfg.Username, cfg.Password}
		}
		if err := u.must(cfg.Timeout, auth...); err != nil {
			return err
		}
	}
	if cfg.DB != 0 {
		if err := u.must(cfg.Timeout, "SELECT", strconv.Itoa(cfg.DB)); err != nil {
			return err
		}
	}
	return u.speak(proto, cfg.Timeout)
}

// speak switches the connection to proto with HELLO when it differs.
func (u *upConn) speak(proto int, timeout time.Duration) error {
	if proto == u.proto {
		return nil
	}
	if err := u.must(timeout, "HELLO", strconv.Itoa(proto)); err != nil {
		return err
	}
	u.proto = proto
	return nil
}

// must sends a set-up command and fails on an error reply.
func (u *upConn) must(timeout time.Duration, args ...string) error {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	reply, err := u.roundTrip(b, timeout)
	if err != nil {
		return err
	}
	if len(reply) > 0 && (reply[0] == '-' || reply[0] == '!') {
		return errors.New(args[0] + ": " + string(trimCRLF(reply[1:])))
	}
	return nil
}

// clientID is the connection's CLIENT ID, asked once.
func (u *upConn) clientID(timeout time.Duration) (int64, error) {
	if id := u.id.Load(); id != 0 {
		return id, nil
	}
	reply, err := u.roundTrip([][]byte{[]byte("CLIENT"), []byte("ID")}, timeout)
	if err != nil {
		return 0, err
	}
	if len(reply) < 3 || reply[0] != ':' {
		return 0, errors.New("CLIENT ID: " + string(trimCRLF(reply)))
	}
	id, err := strconv.ParseInt(string(trimCRLF(reply[1:])), 10, 64)
	if err != nil {
		return 0, errors.New("CLIENT ID: " + string(trimCRLF(reply)))
	}
	u.id.Store(id)
	return id, nil
}

// do sends args in proto and returns the raw reply, valid until the next
// call. Its error says whether args was sent (notSentError, unknownError).
func (u *upConn) do(proto int, args [][]byte, timeout time.Duration) ([]byte, error) {
	if err := u.speak(proto, timeout); err != nil {
		return nil, notSent(err)
	}
	reply, err := u.roundTrip(args, timeout)
	return reply, unknown(err)
}

// roundTrip writes one command and reads one reply; timeout 0 waits as long
// as the data Redis takes (blocking commands).
func (u *upConn) roundTrip(args [][]byte, timeout time.Duration) ([]byte, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	_ = u.nc.SetDeadline(deadline)
	b := appendCommand(u.buf[:0], args)
	if _, err := u.bw.Write(b); err != nil {
		return nil, err
	}
	if err := u.bw.Flush(); err != nil {
		return nil, err
	}
	reply, err := readReply(u.br, b[:0])
	u.buf = reply
	return reply, err
}

// appendCommand appends args as a RESP array of bulk strings.
func appendCommand(b []byte, args [][]byte) []byte {
	b = append(strconv.AppendInt(append(b, '*'), int64(len(args)), 10), '\r', '\n')
	for _, a := range args {
		b = append(strconv.AppendInt(append(b, '$'), int64(len(a)), 10), '\r', '\n')
		b = append(append(b, a...), '\r', '\n')
	}
	return b
}

func (u *upConn) close() { _ = u.nc.Close() }

func trimCRLF(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
