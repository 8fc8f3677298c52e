// Package netfault puts faults between a client and a server on loopback,
// for tests and the benchmark: a TCP proxy that delays every byte it
// forwards by a delay that can be changed while it runs, and that can
// blackhole every byte for a while (a partition).
package netfault
