// Command faultsuite runs lockproxy under injected faults and checks that
// no lock is granted twice and no stale write gets through a fence.
package main
