// Package zktest starts real ZooKeeper servers — standalone, or an ensemble
// of several — on free loopback ports for tests and benchmarks, and stops
// exactly the processes it started.
//
// It runs Debian's zookeeper package: /usr/share/zookeeper/bin/zkServer.sh
// start-foreground DIR/zoo.cfg with ZOOCFGDIR=DIR, which execs the JVM, so
// the process it starts is the server and Kill, Pause (SIGSTOP) and Resume
// (SIGCONT) act on it directly. StartTLS adds a TLS client port (Netty
// connection factory, PEM key and trust stores). It must not depend on lockproxy's own
// packages. A missing ZooKeeper is an error (a test failure), never a skip.
package zktest
