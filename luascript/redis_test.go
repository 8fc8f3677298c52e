package luascript

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Test helpers over a real redis-server: a Locks built from plain commands
// and a raw RESP2 connection (go-redis returns status and bulk replies both
// as string, so EVAL replies are read raw to tell them apart).

// redisLocks implements Locks with GET, PTTL, SET NX PX, PEXPIRE and DEL.
// Its check-then-act is not atomic; the tests run one call at a time.
type redisLocks struct{ c *redis.Client }

var _ Locks = redisLocks{}

func (r redisLocks) Get(ctx context.Context, key string) (string, int64, bool, error) {
	v, err := r.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	pttl, err := r.c.PTTL(ctx, key).Result()
	if err != nil || pttl == -2 {
		return "", 0, false, err
	}
	if pttl < 0 {
		return v, -1, true, nil
	}
	return v, pttl.Milliseconds(), true, nil
}

func (r redisLocks) SetNX(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	args := []any{"SET", key, token, "NX"}
	if ttl > 0 {
		args = append(args, "PX", ttl.Milliseconds())
	}
	err := r.c.Do(ctx, args...).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

func (r redisLocks) holds(ctx context.Context, key, token string) (bool, error) {
	v, err := r.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil && v == token, err
}

func (r redisLocks) PExpire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if ok, err := r.holds(ctx, key, token); !ok || err != nil {
		return false, err
	}
	return r.c.PExpire(ctx, key, ttl).Result()
}

func (r redisLocks) Del(ctx context.Context, key, token string) (bool, error) {
	if ok, err := r.holds(ctx, key, token); !ok || err != nil {
		return false, err
	}
	n, err := r.c.Del(ctx, key).Result()
	return n == 1, err
}

// respError is an error reply read by respConn.
type respError string

func (e respError) Error() string { return string(e) }

// respConn is a raw RESP2 connection.
type respConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRESP(t *testing.T, addr string) *respConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &respConn{conn: conn, r: bufio.NewReader(conn)}
}

// do sends a command and reads its reply; an error reply is a respError.
func (rc *respConn) do(args ...string) (Reply, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := rc.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return Reply{}, err
	}
	if _, err := rc.conn.Write([]byte(b.String())); err != nil {
		return Reply{}, err
	}
	return readReply(rc.r)
}

func readReply(r *bufio.Reader) (Reply, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return Reply{}, err
	}
	if len(line) < 3 {
		return Reply{}, fmt.Errorf("short RESP line %q", line)
	}
	kind, body := line[0], strings.TrimSuffix(line[1:], "\r\n")
	switch kind {
	case '+':
		return Reply{Kind: Status, Str: body}, nil
	case '-':
		return Reply{}, respError(body)
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		return Reply{Kind: Int, Int: n}, err
	case '$':
		return readBulk(r, body)
	case '*':
		return readArray(r, body)
	}
	return Reply{}, fmt.Errorf("unknown RESP type %q", line)
}

func readBulk(r *bufio.Reader, size string) (Reply, error) {
	n, err := strconv.Atoi(size)
	if err != nil || n < 0 {
		return Reply{Kind: Null}, err
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return Reply{}, err
	}
	return Reply{Kind: Bulk, Str: string(buf[:n])}, nil
}

func readArray(r *bufio.Reader, size string) (Reply, error) {
	n, err := strconv.Atoi(size)
	if err != nil || n < 0 {
		return Reply{Kind: Null}, err
	}
	out := Reply{Kind: Array, Array: make([]Reply, n)}
	for i := range out.Array {
		if out.Array[i], err = readReply(r); err != nil {
			return Reply{}, err
		}
	}
	return out, nil
}
