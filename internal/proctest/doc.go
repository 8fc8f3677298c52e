// Package proctest runs the server processes that redistest and zktest
// start for tests and benchmarks: one run at a time per server, its output
// in a log file, killed with the test binary, and stopped, paused or
// resumed by the PID it started — never any other process.
//
// It must not depend on lockproxy's own packages nor on the testing
// package: the benchmark program uses it too.
package proctest
