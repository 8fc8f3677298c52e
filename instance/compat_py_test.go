package instance_test

import (
	"os/exec"
	"testing"
)

// systemPython is Debian's interpreter, which has python3-redis; the
// python3 first on PATH may be another one without it.
const systemPython = "/usr/bin/python3"

// TestCompatRedisPy runs the checklist with redis-py's Lock (Debian's
// python3-redis): testdata/compat/python/compat.py. redis-py takes the lock
// with SET NX PX and sends its release, extend and reacquire scripts with
// EVALSHA, then SCRIPT LOAD and EVALSHA again on NOSCRIPT.
func TestCompatRedisPy(t *testing.T) {
	out, err := exec.Command(systemPython, "-c", "import redis; print(redis.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot import redis (apt-get install python3-redis): %v\n%s", systemPython, err, out)
	}
	compatTargets(t, func(t *testing.T, addr string) {
		compatRunScript(t, "testdata/compat/python", systemPython, "compat.py", addr)
	})
}
