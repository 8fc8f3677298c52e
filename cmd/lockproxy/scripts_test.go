package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestScriptsTestInstallsWhatTheTestsUse: scripts/test, the README's test
// command on a fresh machine (issue 28 §5), knows a Debian package for
// every outside program and file the tests use, finds each installed here
// by the file it checks (else it would install or complain on every run),
// and .ci/run calls it. The README's list lacked libnetty-java.
func TestScriptsTestInstallsWhatTheTestsUse(t *testing.T) {
	script, err := os.ReadFile("../../scripts/test")
	if err != nil {
		t.Fatal(err)
	}
	entries := regexp.MustCompile(`(?m)^  "([a-z0-9-]+):(/[^"]+)"$`).FindAllStringSubmatch(string(script), -1)
	files := map[string]string{}
	for _, e := range entries {
		files[e[1]] = e[2]
		if _, err := os.Stat(e[2]); err != nil {
			t.Errorf("scripts/test checks package %s by %s, which is not here: %v", e[1], e[2], err)
		}
	}
	for pkg, file := range map[string]string{
		"redis-server":  "/usr/bin/redis-server",                            // internal/redistest
		"redis-tools":   "/usr/bin/redis-cli",                               // the redis-cli tests
		"python3-redis": "/usr/lib/python3/dist-packages/redis/__init__.py", // the redis-py compat test
		"zookeeper":     "/usr/share/zookeeper/bin/zkServer.sh",             // internal/zktest
		"libnetty-java": "/usr/share/java/netty-codec.jar",                  // zktest's TLS class path
		"prometheus":    "/usr/bin/promtool",                                // instance.TestAlertRules
	} {
		if files[pkg] != file {
			t.Errorf("scripts/test does not install %s (for %s): it checks %q", pkg, file, files[pkg])
		}
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^scripts/test\b`).Match(ci) {
		t.Errorf(".ci/run does not run scripts/test:\n%s", ci)
	}
}

// TestScriptsTestSaysWhatIsMissing: without Go on its PATH, scripts/test
// says so and stops, before running anything. Its PATH holds only the few
// tools the script needs before that.
func TestScriptsTestSaysWhatIsMissing(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"dirname", "id", "sed"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "../../scripts/test", "-run", "^$")
	cmd.Env = append(os.Environ(), "PATH="+bin)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "scripts/test: go is not installed (Go 1.26") {
		t.Fatalf("scripts/test without go: %v\n%s", err, out)
	}
}
