package instance_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAlertRules runs deploy/alerts_test.yml with `promtool test rules`
// (Debian's prometheus package; scripts/test installs it): the alerts go
// by the nodes that count, so nodes that answer but are held out by the
// restart rule fire LockproxyNoQuorum (issue 28 §4: it did not fire). A
// missing promtool is a failure, not a skip.
func TestAlertRules(t *testing.T) {
	out, err := exec.Command("promtool", "test", "rules", "../deploy/alerts_test.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules deploy/alerts_test.yml: %v\n%s", err, out)
	}
}
