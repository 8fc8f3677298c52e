package quorum

// Test-only API.

// Quorum is the number of nodes that must agree.
func (r *Redlock) Quorum() int { return r.quorum }
