package proctest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"
)

// buildTimeout bounds one build of lockproxy.
const buildTimeout = 5 * time.Minute

// BuildLockproxy builds ./cmd/lockproxy into dir, for the benchmark and
// the fault suite, which run lockproxy as a process of its own, and
// returns the binary's path.
func BuildLockproxy(ctx context.Context, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	bin := filepath.Join(dir, "lockproxy")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/lockproxy/lockproxy/cmd/lockproxy")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build lockproxy: %w\n%s", err, out)
	}
	return bin, nil
}
