//go:build unix

package instance_test

import (
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// lockDirExclusive holds an advisory lock (flock) for dir, shared by every
// test process on the machine, until the returned func is called: two
// concurrent go test runs in one worktree must not run npm ci in the same
// directory at once. The kernel drops the lock if the process dies.
func lockDirExclusive(t *testing.T, dir string) (unlock func()) {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(os.TempDir(), fmt.Sprintf("lockproxy-npm-%x.lock", sha1.Sum([]byte(abs))))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("flock %s: %v", name, err)
	}
	return func() { f.Close() }
}
