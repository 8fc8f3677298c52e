package upstream

import (
	"context"

	"github.com/lockproxy/lockproxy/quorum"
)

// Test-only API.

// Commit runs commit.lua: raise the fencing counter to at least fence and
// record fence on the lock if token holds it.
func (n *RedisNode) Commit(ctx context.Context, key, token string, fence int64) (bool, error) {
	r := n.do(ctx, &quorum.Op{Kind: quorum.OpCommit, Key: key, Token: token, Fence: fence})
	return r.OK, r.Err
}

// queued is the number of calls waiting for room on the node's connection.
func (n *RedisNode) queued() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}
