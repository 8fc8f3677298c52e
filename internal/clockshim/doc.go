// Package clockshim steps a real process's wall clock for tests: an
// LD_PRELOAD library (csrc/clockshim.c, embedded, built with gcc into a test's
// temporary directory) shifts clock_gettime(CLOCK_REALTIME and
// CLOCK_REALTIME_COARSE), gettimeofday and time by an offset read from a
// file, re-read at most once a millisecond. CLOCK_MONOTONIC is not
// shifted. Debian's libfaketime 0.9.10 cannot start redis-server 7.0.15,
// hence this one.
//
// It owns the shim and the offset file only; starting servers belongs to
// redistest (Options.Env). Go binaries ignore LD_PRELOAD: the shim moves
// C programs' clocks (redis-server), not lockproxy's.
package clockshim
