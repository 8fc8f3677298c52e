package instance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

const nodeCompatDir = "testdata/compat/node"

// TestCompatNode runs the checklist with node-redlock v5 (acquire, extend,
// release, using) and with ioredis by hand (SET NX PX, compare-and-delete and
// compare-and-PEXPIRE through defineCommand): testdata/compat/node/compat.js.
// Both send their scripts with EVALSHA, then EVAL on NOSCRIPT. The packages
// are pinned by package-lock.json; when node_modules is missing or does not
// match it, the test installs them with npm ci.
func TestCompatNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (Node.js 20 runs the node-redlock and ioredis checks): %v", err)
	}
	if nodeModulesStale() != "" {
		npmCI(t)
	}
	compatTargets(t, func(t *testing.T, addr string) {
		compatRunScript(t, nodeCompatDir, node, "compat.js", addr)
	})
}

// npmLock is the part of package-lock.json (and of npm's copy of it in
// node_modules/.package-lock.json) that pins what is installed.
type npmLock struct {
	Packages map[string]struct {
		Version   string `json:"version"`
		Integrity string `json:"integrity"`
	} `json:"packages"`
}

// nodeModulesStale says why node_modules does not hold what package-lock.json
// pins, or "" when it does.
func nodeModulesStale() string {
	read := func(name string) (npmLock, error) {
		var l npmLock
		b, err := os.ReadFile(filepath.Join(nodeCompatDir, name))
		if err == nil {
			err = json.Unmarshal(b, &l)
		}
		return l, err
	}
	want, err := read("package-lock.json")
	if err != nil {
		return fmt.Sprintf("package-lock.json: %v", err)
	}
	have, err := read("node_modules/.package-lock.json")
	if err != nil {
		return "node_modules is not installed"
	}
	for path, p := range want.Packages {
		if path == "" {
			continue
		}
		if h, ok := have.Packages[path]; !ok || h.Version != p.Version || h.Integrity != p.Integrity {
			return fmt.Sprintf("%s is not the locked %s", path, p.Version)
		}
	}
	return ""
}

// npmCI installs the locked packages unless another test process did while
// this one waited for the directory's lock; failing to is a test failure.
func npmCI(t *testing.T) {
	t.Helper()
	defer lockDirExclusive(t, nodeCompatDir)()
	why := nodeModulesStale()
	if why == "" {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("%s, and npm is not installed to run npm ci in %s: %v", why, nodeCompatDir, err)
	}
	t.Logf("%s: running npm ci in %s", why, nodeCompatDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = nodeCompatDir
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s failed (the npm registry must be reachable to install node-redlock and ioredis): %v\n%s", nodeCompatDir, err, out)
	}
	if stale := nodeModulesStale(); stale != "" {
		t.Fatalf("after npm ci in %s: %s", nodeCompatDir, stale)
	}
}
