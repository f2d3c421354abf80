// Package process assembles flashgate's processes from their settings: a
// gateway (the Redis client, the scripts, the sales, the payment sweeper and
// the outbox relay, around the HTTP edge it is given) and a consumer (the
// consumer, its database, and the repairer that vouches for it). Each part
// is built in the order the parts depend on each other, linked once here,
// and run by Run until its context ends.
//
// cmd/flashgate parses the flags and calls it; the tests and the bench
// start a gateway or a consumer through it, never by a copy of the wiring.
// It does not import the edge (gateway/), so that the edge's own tests can
// start a gateway through it too.
package process
