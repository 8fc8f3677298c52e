// Package netfault puts faults between a client and a server on loopback,
// for tests and the benchmark: a TCP proxy that delays every byte it
// forwards by a delay that can be changed while it runs.
package netfault
