package engine

import "sync/atomic"

// Stats counts what the engine did since it started.
type Stats struct {
	Grants        atomic.Int64 // locks granted (LOCK, legacy acquire, retries)
	Releases      atomic.Int64 // locks released by their holder or on disconnect
	Renewals      atomic.Int64 // successful watchdog renewals
	RenewFailures atomic.Int64 // watchdog renewals that failed
	Lost          atomic.Int64 // locks lost or taken from their holder (renewal failed, session expired, DEL from another connection)
	Delayed       atomic.Int64 // bound locks kept for their lock-delay after their connection closed
}
