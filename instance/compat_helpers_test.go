package instance_test

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/instance"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The compat tests drive real lock libraries, unmodified, through their own
// lock helpers. Every check is a function of an address and runs twice: as
// "redis" against one plain redis-server, which proves the check itself is
// right, and as "lockproxy" against lockproxy over three redis-servers.
//
// The checklist each library goes through (one subtest per step, each on
// its own key, so that one failing step does not hide the others):
//
//  1. acquire;
//  2. a second owner is refused;
//  3. the owner extends;
//  4. a non-owner's release is refused and the lock is still held;
//  5. the owner releases, then another owner acquires;
//  6. a blocking acquire succeeds once the holder releases (from another
//     goroutine, ~200 ms later);
//  7. an unreleased lease expires: a short-TTL lock refuses another owner
//     first, and lets it acquire after the TTL.

// Timing of the checklist.
const (
	compatHoldFor   = 200 * time.Millisecond // step 6: the holder releases after this
	compatShortTTL  = 400 * time.Millisecond // step 7: the lease left to expire
	compatWaitBound = 5 * time.Second        // any wait for a condition
)

// compatTargets runs check as "redis" (one plain redis-server) and as
// "lockproxy" over each backend.
func compatTargets(t *testing.T, check func(t *testing.T, addr string)) {
	t.Run("redis", func(t *testing.T) {
		check(t, redistest.Start(t, redistest.Options{}).Addr())
	})
	t.Run("lockproxy", func(t *testing.T) {
		eachBackend(t, func(t *testing.T, cfg instance.Config) { check(t, startInstance(t, cfg).Addr()) })
	})
}

// compatCtx is a context bounded by compatWaitBound, cancelled when the test
// ends.
func compatCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), compatWaitBound)
	t.Cleanup(cancel)
	return ctx
}

// compatReleaseLater calls release after compatHoldFor in another
// goroutine; the channel yields when it was called and its error.
func compatReleaseLater(release func() error) <-chan compatRelease {
	done := make(chan compatRelease, 1)
	go func() {
		time.Sleep(compatHoldFor)
		at := time.Now()
		done <- compatRelease{at: at, err: release()}
	}()
	return done
}

// compatRelease is when the holder's release was called, and its error.
type compatRelease struct {
	at  time.Time
	err error
}

// compatWaitRelease waits (bounded) for compatReleaseLater's result, fails
// the test if the release failed, and returns when it was called.
func compatWaitRelease(t *testing.T, done <-chan compatRelease) time.Time {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("holder's release: %v", r.err)
		}
		return r.at
	case <-time.After(compatWaitBound):
		t.Fatalf("holder's release did not return within %v", compatWaitBound)
	}
	return time.Time{}
}

// compatRunScript runs a compat script (python or node) with the address as
// its argument, bounded in time, and reports it: every output line is
// logged, every "FAIL" line is an error, and so is a non-zero exit. The
// script prints one "ok <step>" or "FAIL <step>: <why>" line per step.
func compatRunScript(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	compatRunSteps(t, 7, dir, name, args...)
}

// compatRunSteps is compatRunScript for a script of steps steps.
func compatRunSteps(t *testing.T, steps int, dir string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	passed, failed := 0, 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "ok "):
			passed++
			t.Log(line)
		case strings.HasPrefix(line, "FAIL "):
			failed++
			t.Error(line)
		default:
			t.Log(line)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: did not finish within 60s", name, strings.Join(args, " "))
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if failed == 0 {
			t.Errorf("%s %s: %v (no FAIL line: see the output above)", name, strings.Join(args, " "), err)
		}
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	case failed > 0:
		t.Errorf("%s reported %d failures but exited 0", name, failed)
	case passed < steps:
		t.Errorf("%s passed only %d steps and exited 0; the checklist has %d", name, passed, steps)
	}
}
