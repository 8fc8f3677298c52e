//go:build !race

package instance_test

import "testing"

// processMemory is what the memory tests measure: the process's RSS (see
// memory_race_test.go for the race detector's build).
func processMemory(t *testing.T) int64 { return rssBytes(t) }
