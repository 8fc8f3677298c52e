package clockshim

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

//go:embed csrc/clockshim.c
var source []byte

// OffsetEnv names the environment variable the shim reads the offset
// file's path from.
const OffsetEnv = "CLOCKSHIM_OFFSET_FILE"

// Build compiles the shim with gcc into dir and returns the library's path.
func Build(dir string) (string, error) {
	src := filepath.Join(dir, "clockshim.c")
	lib := filepath.Join(dir, "clockshim.so")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", lib, src, "-ldl").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("clockshim: gcc: %w\n%s", err, out)
	}
	return lib, nil
}

// Clock is one offset file: the wall-clock offset of every process
// started with its Env.
type Clock struct {
	lib, path string
	mu        sync.Mutex
	offset    time.Duration
}

// New makes an offset file in dir, at offset 0, for processes preloading
// lib (Build).
func New(lib, dir string) (*Clock, error) {
	f, err := os.CreateTemp(dir, "clock-offset-*")
	if err != nil {
		return nil, err
	}
	f.Close()
	c := &Clock{lib: lib, path: f.Name()}
	return c, c.Set(0)
}

// Env is the environment that puts a process under the clock.
func (c *Clock) Env() []string {
	return []string{"LD_PRELOAD=" + c.lib, OffsetEnv + "=" + c.path}
}

// Set sets the offset; processes under the clock see it within a
// millisecond. The file is replaced whole (rename), never read half
// written.
func (c *Clock) Set(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(d.Nanoseconds(), 10)), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return err
	}
	c.offset = d
	return nil
}

// Step moves the clock by d (forward when positive) and returns the new
// offset.
func (c *Clock) Step(d time.Duration) (time.Duration, error) {
	c.mu.Lock()
	next := c.offset + d
	c.mu.Unlock()
	return next, c.Set(next)
}

// Offset is the offset last set.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}
