package zookeeper

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"
)

// ErrClosed is returned by calls on a closed backend.
var ErrClosed = errors.New("zookeeper: the backend is closed")

// millis is d in whole milliseconds, rounded up; 0 for a d that is not
// positive.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// orDefault returns v, or def when v is the zero value (or negative).
func orDefault[T int | string | time.Duration](v, def T) T {
	var zero T
	if v <= zero {
		return def
	}
	return v
}

// instanceID is 16 random hex digits naming a backend in the leases it
// writes.
func instanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
