package redistest

import "testing"

// Start starts one redis-server in a fresh t.TempDir and stops it when the
// test ends. Failing to start, including a missing binary, fails the test.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := StartProcess(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop redis-server %s: %v", s.Addr(), err)
		}
	})
	return s
}

// StartN starts n independent redis-servers, each in its own directory.
func StartN(t testing.TB, n int, opts Options) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, opts)
	}
	return servers
}
