package resp_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/tlstest"
	"github.com/lockproxy/lockproxy/resp"
)

func tlsConfigs(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	ca := tlstest.NewCA(t, "resp")
	files := ca.Server(t, "srv")
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{pair}}, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}

// TestTLSSilentClientBlocksNobody: at max_clients over TLS, a client that
// connects and never starts its handshake does not hold up the refusal of
// the next client, nor the service of the one connected; a plain-text
// client gets no service.
func TestTLSSilentClientBlocksNobody(t *testing.T) {
	srvTLS, cliTLS := tlsConfigs(t)
	s := newOpsServer(t, resp.Config{MaxClients: 1, TLS: srvTLS})
	s.tls = cliTLS
	held := s.dial(t)
	if got := held.do(t, "PING"); got != "+PONG" {
		t.Fatalf("over TLS: %q", got)
	}
	silent, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	refused := s.dial(t)
	_ = refused.SetReadDeadline(time.Now().Add(handshakeWait))
	if got := refused.reply(t); got != "-ERR max number of clients reached" {
		t.Fatalf("the refusal: %q", got)
	}
	if got := held.do(t, "PING"); got != "+PONG" {
		t.Fatalf("the connected client: %q", got)
	}
	plain, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_ = plain.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := plain.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _ := plain.Read(buf); string(buf[:n]) == "+PONG\r\n" {
		t.Fatal("a plain-text client was served by a TLS listener")
	}
}

// handshakeWait bounds the wait for the refusal. A server whose accept loop
// waited on the silent client's handshake would never send it.
const handshakeWait = 30 * time.Second

// TestTLSAbortWaitsForNoReader: CLIENT KILL, Drop and Server.Close close a
// TLS client at once. Go's TLS library waits up to closeNotifyWait to write
// its close_notify alert; nothing reads this pipe, so a close that sent the
// alert would wait that long.
func TestTLSAbortWaitsForNoReader(t *testing.T) {
	srvTLS, cliTLS := tlsConfigs(t)
	srvTLS.SessionTicketsDisabled = true // the server's tickets would wait for a reader too
	a, b := net.Pipe()
	defer b.Close()
	srv, cli := tls.Server(a, srvTLS), tls.Client(b, cliTLS)
	handshake := make(chan error, 1)
	go func() { handshake <- cli.Handshake() }()
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-handshake; err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- resp.Abort(srv) }()
	select {
	case <-done:
	case <-time.After(closeNotifyWait / 2):
		t.Fatalf("closing a TLS client that reads nothing waited %v: the close_notify alert was sent", closeNotifyWait/2)
	}
}

// closeNotifyWait is how long Go's tls.Conn.Close waits to write its
// close_notify alert.
const closeNotifyWait = 5 * time.Second
