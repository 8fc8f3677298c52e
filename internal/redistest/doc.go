// Package redistest starts real redis-server processes on free loopback ports
// for tests and benchmarks, and stops exactly the processes it started.
//
// It must not depend on lockproxy's own packages, and StartProcess must not
// depend on the testing package: the benchmark program uses it too. A missing
// redis-server binary is an error (a test failure), never a skip.
package redistest
