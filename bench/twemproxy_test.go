package main

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// noHello must answer HELLO itself, with the error go-redis falls back to
// RESP2 on, and pass every other command through unchanged.
func TestNoHelloAnswersHelloOnly(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	c := &noHello{Conn: client}

	hello := "*2\r\n$5\r\nhello\r\n$1\r\n2\r\n"
	if n, err := c.Write([]byte(hello)); n != len(hello) || err != nil {
		t.Fatalf("Write(HELLO) = %d, %v", n, err)
	}
	want := "-ERR unknown command 'HELLO'\r\n"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("reply to HELLO = %q, %v; want %q", got, err, want)
	}

	set := "*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$1\r\nv\r\n" // a key named hello is a SET, not HELLO
	go func() { _, _ = c.Write([]byte(set)) }()
	fwd := make([]byte, len(set))
	if _, err := io.ReadFull(server, fwd); err != nil || string(fwd) != set {
		t.Fatalf("the server got %q, %v; want %q", fwd, err, set)
	}
	go func() { _, _ = server.Write([]byte("+OK\r\n")) }()
	ok := make([]byte, 5)
	if _, err := io.ReadFull(c, ok); err != nil || string(ok) != "+OK\r\n" {
		t.Fatalf("reply to SET = %q, %v", ok, err)
	}
}

// retryUntil stops at the first success, and when the process it waits
// for exits, with try's last error.
func TestRetryUntil(t *testing.T) {
	n := 0
	err := retryUntil(t.Context(), time.Millisecond, nil, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("retryUntil = %v after %d tries; want nil after 3", err, n)
	}
	exited := make(chan struct{})
	close(exited)
	err = retryUntil(t.Context(), time.Hour, exited, func() error { return errors.New("refused") })
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("retryUntil after exit = %v", err)
	}
}
