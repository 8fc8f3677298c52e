// Package pubsub routes messages to the SUBSCRIBE and PSUBSCRIBE clients of
// one lockproxy instance. Without a Remote (the zookeeper backend), PUBLISH
// reaches this process's subscribers only. With one (the redlock and
// embedded backends), the hub subscribes on the Redis nodes each channel or
// pattern its clients listen to, PUBLISH goes to every node, and what the
// nodes send back — the same message once per node — is delivered once
// (Dedup). It must not know RESP (resp/ turns deliveries into replies) nor
// Redis (upstream/ talks to the nodes).
package pubsub
