// Package pubsub routes PUBLISH to the SUBSCRIBE and PSUBSCRIBE clients of
// one lockproxy instance. A Transport, when given, carries messages between
// the instances that share a backend; without one, messages stay in the
// process. It must not know RESP: resp/ turns deliveries into replies.
package pubsub
