// Package instance wires one lockproxy instance together from a Config: the
// backend (embedded, Redlock over Redis nodes, or ZooKeeper), handed the
// engine's Events when it is built; the lock engine; the RESP server with
// the command table, TLS, protected mode and users; the passthrough router
// to a data Redis when one is configured; and the metrics and health
// listener with per-node health. It also reloads what SIGHUP may change and
// drains the instance on shutdown.
//
// cmd/lockproxy turns flags and a config file into a Config and calls
// Start; tests and benchmarks call Start to run instances in-process.
package instance
