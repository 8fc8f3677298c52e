//go:build !unix

package instance_test

import "testing"

// lockDirExclusive is a no-op where flock is missing: concurrent test runs
// in one worktree may then race on npm ci.
func lockDirExclusive(t *testing.T, dir string) (unlock func()) { return func() {} }
