// Package pubsub routes messages to the SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE
// clients of one lockproxy instance; shard channels (Kind Shard) are a
// namespace of their own, as on a Redis that is not a cluster. Without a
// Remote (the zookeeper backend), PUBLISH and SPUBLISH reach this
// process's subscribers only. With one (the redlock and
// embedded backends), the hub subscribes on the Redis nodes each channel or
// pattern its clients listen to, PUBLISH goes to every node, and what the
// nodes send back — the same message once per node — is delivered once
// (Dedup). It must not know RESP (resp/ turns deliveries into replies) nor
// Redis (upstream/ talks to the nodes).
package pubsub
