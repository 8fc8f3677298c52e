package clockshim

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// StartRedis builds the shim in a t.TempDir and starts a redis-server under
// a clock of its own, stopped when the test ends. A missing gcc or
// redis-server fails the test.
func StartRedis(t testing.TB, opts redistest.Options) (*redistest.Server, *Clock) {
	t.Helper()
	dir := t.TempDir()
	lib, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(lib, dir)
	if err != nil {
		t.Fatal(err)
	}
	opts.Env = append(opts.Env, c.Env()...)
	return redistest.Start(t, opts), c
}
