// Package instance wires one lockproxy instance together from a Config: the
// backend (embedded, or Redlock over Redis nodes), the lock engine, the
// RESP server with the command table, and the metrics and health listener.
// It also drains the instance on shutdown.
//
// cmd/lockproxy turns flags and a config file into a Config and calls Run;
// tests and benchmarks call Start to run instances in-process.
package instance
