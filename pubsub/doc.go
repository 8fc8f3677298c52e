// Package pubsub routes PUBLISH to the SUBSCRIBE and PSUBSCRIBE clients of
// one lockproxy instance; messages do not yet travel between the instances
// that share a backend. It must not know RESP: resp/ turns deliveries into
// replies.
package pubsub
