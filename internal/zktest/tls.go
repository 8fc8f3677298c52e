package zktest

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TLS makes a server also listen for TLS clients, on SecureAddr. Its plain
// port stays open for the four-letter words this package polls.
type TLS struct {
	CertFile, KeyFile string // the server's certificate and key, PEM
	// CAFile, when set, holds the PEM CAs of the clients' certificates,
	// and clients must present one (ssl.clientAuth=need).
	CAFile string
}

// StartTLS starts a standalone server that also serves TLS, as StartTLS
// describes, and stops it when the test ends.
func StartTLS(t testing.TB, tls TLS) *Server {
	t.Helper()
	e, err := startEnsemble(t.TempDir(), 1, &tls)
	if err != nil {
		t.Fatal(err)
	}
	s := e.servers[0]
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop zookeeper %s: %v", s.Addr(), err)
		}
	})
	return s
}

// SecureAddr is the TLS client address, "127.0.0.1:PORT"; "" without TLS.
func (s *Server) SecureAddr() string {
	if s.tls == nil {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.securePort))
}

// tlsConfig are zoo.cfg's lines for TLS clients. ZooKeeper (3.6 and
// later) reads PEM key and trust stores; the key store is one file holding
// the key, in PKCS#8 as ZooKeeper reads it, and the certificate.
func (s *Server) tlsConfig() ([]string, error) {
	if s.tls == nil {
		return nil, nil
	}
	store := filepath.Join(s.dir, "keystore.pem")
	if err := writeKeyStore(store, s.tls.CertFile, s.tls.KeyFile); err != nil {
		return nil, err
	}
	lines := []string{
		"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"secureClientPort=" + strconv.Itoa(s.securePort), "secureClientPortAddress=127.0.0.1",
		"ssl.keyStore.location=" + store, "ssl.keyStore.type=PEM",
		"ssl.clientAuth=none",
	}
	if s.tls.CAFile != "" {
		lines[len(lines)-1] = "ssl.clientAuth=need"
		lines = append(lines, "ssl.trustStore.location="+s.tls.CAFile, "ssl.trustStore.type=PEM")
	}
	return lines, nil
}

// writeKeyStore writes keyFile's key as PKCS#8, then certFile, to store.
func writeKeyStore(store, certFile, keyFile string) error {
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return errors.New("zktest: no PEM key in " + keyFile)
	}
	der := block.Bytes
	if block.Type == "EC PRIVATE KEY" {
		key, err := x509.ParseECPrivateKey(der)
		if err != nil {
			return fmt.Errorf("zktest: %s: %w", keyFile, err)
		}
		if der, err = x509.MarshalPKCS8PrivateKey(key); err != nil {
			return err
		}
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	out := append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), cert...)
	return os.WriteFile(store, out, 0o600)
}

// classPath is Debian's class path plus netty-codec, which the Netty
// connection factory needs and Debian's zookeeper.jar does not list.
const classPath = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar"
