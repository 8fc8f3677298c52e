//go:build race

package instance_test

import (
	"runtime"
	"testing"
)

// processMemory is what the memory tests measure. Under the race detector
// the process's RSS counts the detector's shadow of every heap byte, which
// it never gives back, so the tests measure the memory the Go runtime
// holds from the operating system instead (lockproxy's part of the RSS).
func processMemory(*testing.T) int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.Sys - m.HeapReleased)
}
