// Package rawconn wraps TCP connections so that their reads and writes do
// not wake the Go runtime's system monitor.
//
// Go enters every system call through the scheduler, and a call made while
// every thread was idle wakes the runtime's monitor thread, which then polls
// every 20 µs until the threads are idle again. lockproxy is idle between
// most of its reads and writes: it waits for a client's next command, then
// for ZooKeeper's or Redis's answer. At one request at a time those wake-ups
// are about a third of its CPU time (perf on the ZooKeeper benchmark at
// concurrency 1), on cores it shares with its clients and servers.
//
// A read or write on a non-blocking socket returns at once, with the bytes
// it moved or EAGAIN, so it may be made as a raw system call, which skips the
// scheduler; waiting for the socket is still the network poller's, through
// syscall.RawConn, with the connection's deadlines.
package rawconn
