package zktest

import "testing"

// Start starts a standalone ZooKeeper in a fresh t.TempDir and stops it
// when the test ends. Failing to start fails the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop zookeeper %s: %v", s.Addr(), err)
		}
	})
	return s
}

// StartEnsemble starts an n-server ensemble and stops it when the test ends.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	e, err := StartEnsembleProcess(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop zookeeper ensemble: %v", err)
		}
	})
	return e
}
