// Command faultsuite runs lockproxy under injected faults and checks that
// no lock is granted twice and that no stale write gets past a fence.
//
//	go run ./bench/faultsuite -backend redlock -fault kill -duration 60s
//	go run ./bench/faultsuite -backend zookeeper -fault all
//
// Each run starts its own servers on loopback — 3 (or -nodes N)
// redis-servers with appendfsync always, or a 3-server ZooKeeper ensemble —
// and, for each of 2 (-instances) lockproxy subprocesses built from
// ./cmd/lockproxy, a fault-injecting link (internal/netfault) to every
// server. Clients (go-redis) take locks on a few keys through any instance:
// half with LOCK key PX ttl WAIT 1000 TOKEN t, RENEW and UNLOCK, writing
// under their fence to an in-process register that refuses a fence below
// the last accepted one; half with SET key token NX PX ttl and the
// redis.io compare-and-delete script (no fence: checked for overlaps
// only). Native clients retry as real clients do: after a timeout or a
// broken connection the same LOCK ... TOKEN t through another instance,
// after NOQUORUM through the same one (three times at most); one lock in
// three is connection-bound, on a connection of its own, and retried on a
// new connection (the old one closed).
//
// Every -interval a fault of the run's kind hits a random target for
// -length, then heals: kill (SIGKILL a node, restart it with its data),
// pause (SIGSTOP/SIGCONT), restart-empty (kill, delete the data, restart at
// once), partition (the links to the node hold every byte, delivered late
// when it heals), delay (150 ms each way), proxy-kill, proxy-pause, and
// proxy-cut (an instance's links to a majority of nodes blackholed; for
// ZooKeeper to all of them, since its client needs only one server).
//
// A client holds a lock from the grant reply until the request's send
// time plus the validity it was told (or its last renewal's), or until it
// sends the release or learns of a loss. The checker then counts, per key:
// double grants (a grant received while another token's was still held),
// fences that went back (a grant whose fence is not above every earlier
// one), and stale writes (a write the register accepted under a fence
// below one already granted). Any of them makes the exit status 1; a setup
// failure makes it 2.
//
// One table row per run: ops sent, live grants, errors by kind (noquorum:
// -NOQUORUM or -UNAVAILABLE; timeout: -TIMEOUT or no reply in time, an
// unknown outcome; locklost; conn: connection refused or broken; other),
// the violations, writes the register refused, and the longest time
// without a grant on any key. Everything is bounded: the run's length,
// each request's timeout, the number of faults. It stops only the
// processes it started, by PID, and removes its temporary directory
// unless -keep.
package main
